"""llama2.c's current run.c (from a llama2.c tree) through the command-line protocol, against the
float64 NumPy oracle: greedy continuations on stories15M and stories260K shapes, with and without
grouped-query attention. Prompts run.c cannot take (declared `Unsupported`) are drawn again and counted."""

from __future__ import annotations

import numpy as np
import pytest

from tests.llama2c.test_differential import N_NEW, Tally, compare
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.adapters import llama2c
from verifier.plugin.contract import build_checked
from verifier.plugin.interface import Unsupported
from verifier.plugin.llama2c import Llama2cUnavailable, checkout
from verifier.plugin.registry import load_spec
from verifier.reference import NumpyModel

pytestmark = pytest.mark.needs_cc

STORIES15M = preset("llama2c-stories15M")
STORIES260K = preset("llama2c-stories260K")  # n_kv_heads=4 < n_heads=8
CASES = {
    "stories15M": (STORIES15M, 0.1),
    "stories15M-gqa": (STORIES15M.replace(n_kv_heads=2), 0.1),
    "stories260K-gqa": (STORIES260K, 0.2),
    "stories260K-mha": (STORIES260K.replace(n_kv_heads=8), 0.2),
}


@pytest.fixture(scope="session")
def current_run() -> None:
    try:
        checkout.program("run")
    except Llama2cUnavailable as e:
        pytest.skip(f"llama2.c's current run.c is unavailable: {e}")


def continuations(config: ModelConfig, scale: float, wanted: int) -> tuple[Tally, int]:
    """Greedy continuations of random prompts until `wanted` were compared; and how many were declined."""
    weights = init_weights(config, seed=7, scale=scale)
    model = llama2c.build(config, weights)
    oracle = NumpyModel(config, weights, np.float64)
    rng = np.random.default_rng(wanted)
    tally, declined = Tally(), 0
    while tally.runs < wanted and declined < 4 * wanted:
        prompt = rng.integers(0, config.vocab_size, size=int(rng.integers(1, 9)))
        try:
            generated = model.greedy(prompt, N_NEW)
        except Unsupported:
            declined += 1
            continue
        compare(oracle, prompt, generated, tally)
    return tally, declined


@pytest.mark.parametrize(
    ("case", "wanted"),
    [
        ("stories260K-gqa", 12),
        pytest.param("stories260K-gqa", 50, marks=pytest.mark.slow),
        pytest.param("stories260K-mha", 50, marks=pytest.mark.slow),
        pytest.param("stories15M", 50, marks=pytest.mark.slow),
        pytest.param("stories15M-gqa", 50, marks=pytest.mark.slow),
    ],
)
def test_greedy_continuations_equal_the_oracle(current_run: None, case: str, wanted: int) -> None:
    config, scale = CASES[case]
    tally, declined = continuations(config, scale, wanted)
    print(f"{case}: {tally.runs} continuations, {tally.tokens} tokens, {tally.near_ties} ties, {declined} declined")
    assert tally.runs == wanted, f"only {tally.runs} of {wanted} prompts were taken ({declined} declined)"
    assert not tally.mismatches, f"{len(tally.mismatches)} of {tally.runs} differ:\n" + "\n".join(tally.mismatches[:5])


def test_the_built_in_declares_what_run_c_cannot_run(current_run: None) -> None:
    spec = load_spec("llama2c")
    gpt2 = preset("gpt2").replace(n_layers=1, vocab_size=10, n_ctx=8)
    with pytest.raises(Unsupported, match="Llama only"):
        build_checked(spec, gpt2, init_weights(gpt2))
    theta = STORIES260K.replace(rope_theta=500000.0)
    with pytest.raises(Unsupported, match="theta 10000 only"):
        build_checked(spec, theta, init_weights(theta))
    model = build_checked(spec, STORIES260K, init_weights(STORIES260K, scale=0.2))
    assert model.capabilities == frozenset({"greedy"})
    with pytest.raises(Unsupported, match="a prompt of 2 tokens"):
        model.greedy(np.array([5, 9]), 2)


def test_the_source_tree_is_found_by_the_variable_and_compiled_per_source(
    current_run: None, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    tree = tmp_path / "llama2c"
    tree.mkdir()
    (tree / "run.c").write_bytes((checkout.source_tree() / "run.c").read_bytes() + b"\n// edited\n")
    monkeypatch.setenv(checkout.SOURCE_ENV, str(tree))
    monkeypatch.setenv("VERIFIER_LLAMA2C_CACHE", str(tmp_path / "cache"))
    built = checkout.program("run")
    assert built.parent == tmp_path / "cache" and built.name.startswith("run-")
    assert checkout.program("run") == built  # cached
    with pytest.raises(Llama2cUnavailable, match=r"runq\.c does not exist"):
        checkout.program("runq")
    monkeypatch.setenv(checkout.SOURCE_ENV, str(tmp_path / "missing"))
    with pytest.raises(Llama2cUnavailable, match=r"holds no run\.c"):
        checkout.program("run")
