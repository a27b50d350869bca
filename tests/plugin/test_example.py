"""The example third-party models: examples/torch_gpt2.py, a factory of at most 30 lines that meets the
contract and agrees with the oracle through every capability it has; examples/numpy_gpt2.py, which
needs no torch and agrees with the oracle through `logits`; examples/torch_qwen3.py, the Qwen3 of the
"Port a family" walk-through, which conforms, and whose slip the walk-through shows fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verifier
from tests import needs
from verifier.model import stages
from verifier.model.weights import init_weights
from verifier.plugin.contract import build_checked
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.plugin.registry import load_spec
from verifier.properties.oracle import Oracle
from verifier.properties.strategies import configs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_plug_in_code_is_at_most_30_lines() -> None:
    source = (EXAMPLES / "torch_gpt2.py").read_text()
    plug_in = source[source.index("# The plug-in:") :]
    assert len(plug_in.strip().splitlines()) <= 30, plug_in


@needs.torch
@settings(max_examples=5, deadline=None)
@given(config=configs(("gpt2",), max_n_ctx=64, max_layers=3), scale=st.sampled_from([0.02, 0.5]), data=st.data())
def test_the_example_agrees_with_the_oracle_in_every_capability(config, scale: float, data: st.DataObject) -> None:
    weights = init_weights(config, seed=1, scale=scale)
    model = build_checked(load_spec("examples.torch_gpt2:build"), config, weights)
    oracle = Oracle(config, weights)  # the suite's tolerance policy, neighbours included
    B = data.draw(st.integers(1, 3), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    expected = oracle.logits(tokens)
    assert expected.compare(model.logits(tokens)).ok

    pad = data.draw(st.integers(0, T - 1), label="left padding of row 0")
    mask = np.ones_like(tokens)
    mask[0, :pad] = 0
    real = mask.astype(bool)
    assert oracle.logits(tokens, mask)[real].compare(model.logits(tokens, mask)[real]).ok

    cut = data.draw(st.integers(0, T - 1), label="prefix length")
    first, cache = model.decode(tokens[:, :cut]) if cut else (np.zeros((B, 0, config.vocab_size)), None)
    rest, _ = model.decode(tokens[:, cut:], cache)
    assert expected.compare(np.concatenate([first, rest], axis=1)).ok

    trace = model.trace(tokens[0])
    assert list(trace) == list(stages.stage_shapes(config, T))
    divergence = oracle.localize(trace, tokens[0])
    assert divergence.first is None and not divergence.untraced, divergence.describe()


@settings(max_examples=5, deadline=None)
@given(config=configs(("gpt2",), max_n_ctx=32, max_layers=2), scale=st.sampled_from([0.02, 0.5]), data=st.data())
def test_the_numpy_example_agrees_with_the_oracle(config, scale: float, data: st.DataObject) -> None:
    weights = init_weights(config, seed=1, scale=scale)
    model = build_checked(load_spec("examples.numpy_gpt2:build"), config, weights)
    assert model.capabilities == {"logits"}
    oracle = Oracle(config, weights)
    B = data.draw(st.integers(1, 2), label="B")
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = np.random.default_rng(T).integers(0, config.vocab_size, (B, T))
    assert oracle.logits(tokens).compare(model.logits(tokens)).ok
    assert oracle.logits(tokens[0]).compare(model.logits(tokens[0])).ok


# The walk-through's slip (docs/how-to/port-a-family.md): the q/k norms after RoPE, not before.
_NORM_AFTER_ROPE = {
    'q = rope(rms_norm(q, self.w[f"{p}.q_norm.weight"], c.norm_eps), c.rope_theta)':
    'q = rms_norm(rope(q, c.rope_theta), self.w[f"{p}.q_norm.weight"], c.norm_eps)',
    'k = rope(rms_norm(k, self.w[f"{p}.k_norm.weight"], c.norm_eps), c.rope_theta)':
    'k = rms_norm(rope(k, c.rope_theta), self.w[f"{p}.k_norm.weight"], c.norm_eps)',
}  # fmt: skip


@needs.torch
@pytest.mark.parametrize("switches", [{}, {"head_dim": 6, "qkv_bias": True, "o_bias": True}], ids=["plain", "switched"])
def test_the_qwen3_example_agrees_with_the_oracle(switches: dict[str, object]) -> None:
    config = dataclasses.replace(PROBE_CONFIGS["qwen3"], n_layers=2, **switches)
    weights = init_weights(config, seed=2, scale=0.5)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, config.n_ctx))
    model = build_checked(load_spec("examples.torch_qwen3:build"), config, weights)
    assert Oracle(config, weights).logits(tokens).compare(model.logits(tokens)).ok


@needs.torch
@pytest.mark.slow  # 20 s: two runs of the suite in this process, one shrinking a failure
def test_the_qwen3_walk_through_conforms_and_its_slip_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quick = ["-p", "no:cacheprovider", "-k", "logits_agree or batch_rows_equal or qk_normed"]
    report = verifier.check("examples.torch_qwen3:build", pytest_args=quick)
    assert [(v.verdict, v.failed) for v in report.verdicts()] == [("conforms", 0)], report.failures
    assert report.verdicts()[0].passed >= 2
    source = (EXAMPLES / "torch_qwen3.py").read_text()
    for right, slip in _NORM_AFTER_ROPE.items():
        assert right in source
        source = source.replace(right, slip)
    (tmp_path / "my_qwen3.py").write_text(source)
    monkeypatch.syspath_prepend(tmp_path)
    early = ["-p", "no:cacheprovider", "-k", "logits_agree", "--shrink-seconds", "1"]
    slipped = verifier.check("my_qwen3:build", pytest_args=early)
    assert [v.verdict for v in slipped.verdicts()] == ["fails"], slipped.results
