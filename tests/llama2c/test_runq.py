"""llama2.c's runq.c (int8 Q8_0, version-2 files) measured against the float64 reference run on the
dequantized weights as a greedy agreement rate (runq.c also quantizes activations). Its verdict comes
from the property suite at its precision class, the file's Q8_0 (`tests/precision/test_builtins.py`).
Files with a partial group at the end of a row (as llama2.c's export.py writes stories260K's
hidden_dim 172 with group size 64) are flagged, and runq.c on them is measured, not crashed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.formats import llama2c_spec as spec
from verifier.analysis.agreement import greedy_agreement
from verifier.formats import load_checkpoint
from verifier.formats.llama2c_layout import header_for
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.adapters import llama2c
from verifier.plugin.llama2c import Llama2cUnavailable, checkout
from verifier.reference import NumpyModel

pytestmark = pytest.mark.needs_cc

STORIES260K = preset("llama2c-stories260K")  # dim 64, hidden_dim 172, GQA
STORIES15M = preset("llama2c-stories15M")
N_NEW = 4


@pytest.fixture(scope="session")
def runq() -> None:
    try:
        checkout.program("runq")
    except Llama2cUnavailable as e:
        pytest.skip(f"llama2.c's runq.c is unavailable: {e}")


def prompts(config: ModelConfig, count: int) -> list[np.ndarray]:
    """Prompts of 1 or 3..8 ids starting with BOS (1), as llama2.c's users give them."""
    rng = np.random.default_rng(count)
    out = []
    for _ in range(count):
        size = int(rng.choice([1, *range(3, 9)]))
        out.append(np.concatenate([[1], rng.integers(2, config.vocab_size, size=size - 1)]))
    return out


def agreement_on_written_file(config: ModelConfig, count: int):  # type: ignore[no-untyped-def]
    """runq.c on the suite's own version-2 file, against the reference on its dequantized weights."""
    model = llama2c.build_runq(config, init_weights(config, seed=5, scale=0.2))
    checkpoint = load_checkpoint(model.model_path)
    reference = NumpyModel(checkpoint.config, checkpoint.weights, np.float64)
    return greedy_agreement(model, reference, prompts(config, count), N_NEW), checkpoint.findings


def test_runq_on_the_suite_s_file_mostly_agrees(runq: None) -> None:
    config = STORIES260K.replace(n_layers=2)
    result, findings = agreement_on_written_file(config, 12)
    print(f"runq.c, {config.d_ff} hidden, group size {header_for(config, 2).group_size}: {result.describe()}")
    assert not [f for f in findings if "runq.c drops" in f]
    assert result.continuations + result.declined == 12 and result.rate > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stories260K", "stories15M"])
def test_runq_agreement_rate_on_full_shapes(runq: None, name: str) -> None:
    config = {"stories260K": STORIES260K, "stories15M": STORIES15M}[name]
    result, _ = agreement_on_written_file(config, 50)
    print(f"runq.c on {name} (group size {header_for(config, 2).group_size}): {result.describe()}")
    assert result.continuations + result.declined == 50


def test_runq_on_a_partial_group_file_is_a_finding_not_a_crash(runq: None) -> None:
    """The file as llama2.c's export.py writes it (group size 64, hidden_dim 172 = 2 x 64 + 44)."""
    config = STORIES260K.replace(n_layers=2)
    m = spec.random_model(config, seed=5)
    model = llama2c.build_runq(config, spec.canonical(config, m))
    # Prompts start with BOS, so the model file is never renamed and rewritten: replace it by export.py's.
    assert spec.export_v2(model.model_path, config, m) == 64
    checkpoint = load_checkpoint(model.model_path)
    assert "runq.c drops the last 44 inputs of every row of w2: hidden_dim 172" in " ".join(checkpoint.findings)
    reference = NumpyModel(checkpoint.config, checkpoint.weights, np.float64)
    partial = greedy_agreement(model, reference, prompts(config, 12), N_NEW)
    print(f"runq.c on export.py's partial-group file: {partial.describe()}")
    # It ran on every prompt (some stop at BOS, runq.c's declared limit): a finding, not a crash.
    assert partial.continuations + partial.declined == 12 and partial.continuations >= 6
    # The finding reproduced: runq.c agrees far better with the model that has those 44 inputs of w2
    # removed (their weights zeroed) than with the model the file describes.
    dropped = {name: w.copy() for name, w in checkpoint.weights.items()}
    for i in range(config.n_layers):
        dropped[f"model.layers.{i}.mlp.down_proj.weight"][:, 2 * 64 :] = 0.0  # after the whole groups of 64
    truncated = greedy_agreement(model, NumpyModel(config, dropped, np.float64), prompts(config, 12), N_NEW)
    print(f"... against the reference without the last 44 inputs of w2: {truncated.describe()}")
    assert truncated.rate >= 2 * partial.rate
