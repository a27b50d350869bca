"""A model is judged by the class it declares, and the class is named wherever it fails: an
implementation declared bfloat16 with one of the catalog's bugs (attention scaled by 1/d_head,
whose effect on the logits is far beyond bfloat16's bound) fails through the public path, the
message naming bfloat16; an undeclared model computing in bfloat16 fails as float32, and the
failure says it behaves like bfloat16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.meta.suite_runs import mutant_spec, run_suite
from verifier.analysis.precision import BFLOAT16
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.oracle import oracle
from verifier.properties.strategies import Case
from verifier.reference import NumpyModel


def test_a_bfloat16_implementation_with_a_catalog_bug_fails_naming_bfloat16(tmp_path: Path) -> None:
    spec = mutant_spec("ScaleByDHead", "bfloat16")
    report = run_suite(spec, tmp_path, "-k", "test_logits_agree_with_the_oracle")
    (failure,) = report.failures
    assert f"model {spec!r} (bfloat16), logits of" in failure.detail
    assert "exceeds the bfloat16 tolerance" in failure.detail
    (verdict,) = report.verdicts()
    assert (verdict.verdict, verdict.precision, verdict.declared) == ("fails", "bfloat16", True)
    assert failure.precision == "bfloat16"


def bfloat16_undeclared(config: ModelConfig, weights: Weights) -> NumpyModel:
    """A model computing in bfloat16 that declares nothing."""
    return NumpyModel(config, weights, np.float32, rounding=BFLOAT16.rounding)


def _tokens(config: ModelConfig, T: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(1).integers(0, config.vocab_size, T))


def _behaves_like(case: Case) -> tuple[str, str | None]:
    """The failure message of an undeclared bfloat16 model's logits on `case`, and the class recorded."""
    model = build_checked(ModelSpec("undeclared", bfloat16_undeclared, "test"), case.config, case.weights())
    assert model.precision.name == "float32" and not model.precision_declared
    with checks.recording("p") as record:
        checks.judge_at(model, case)
        expected = oracle(case).logits(case.token_array())
        with pytest.raises(checks.PropertyFailure) as failure:
            checks.agree(model.logits(case.token_array()), expected, what="logits", model=model)
    message = str(failure.value)
    assert "model 'undeclared' (float32), logits" in message and "exceeds the float32 tolerance" in message
    return message, record.behaves_like


SMALL = ModelConfig(
    "llama", vocab_size=61, n_ctx=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=40, norm_eps=1e-5,
    tie_embeddings=False,
)  # fmt: skip


def test_an_undeclared_model_computing_in_bfloat16_behaves_like_bfloat16() -> None:
    # Measured on this case: the error is 1.27x tf32's and float16's bounds, 0.022x bfloat16's. (On
    # well-conditioned cases the finer classes' bounds, widened by their neighbours, may hold too:
    # a run records the coarsest class any failure needed.)
    message, behaves_like = _behaves_like(Case(SMALL, 1, 3.0, _tokens(SMALL, 24)))
    assert "within the bfloat16 tolerance" in message and "declare precision = 'bfloat16'" in message
    assert behaves_like == "bfloat16"


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # float16's emulation overflows
def test_a_case_beyond_float16_s_range_does_not_say_the_model_behaves_like_float16() -> None:
    """At weight scale 10 float16's emulation overflows, so its bound is infinite: the error is
    1.04x tf32's bound and 0.12x bfloat16's, and the message must name bfloat16, not float16."""
    config = SMALL.replace(family="gpt2", n_heads=1, n_kv_heads=1, tie_embeddings=True)
    message, behaves_like = _behaves_like(Case(config, 1, 10.0, _tokens(config, 12)))
    assert "float16 tolerance inf" not in message and "within the bfloat16 tolerance" in message
    assert behaves_like == "bfloat16"
