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
from verifier.properties.strategies import LARGE_LOGITS
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


def test_an_undeclared_model_computing_in_bfloat16_behaves_like_bfloat16() -> None:
    # Attention scores in the hundreds: beyond tf32's and float16's bounds, within bfloat16's. (On
    # well-conditioned cases the finer classes' bounds, widened by their neighbours, may hold too:
    # a run records the coarsest class any failure needed.)
    case = LARGE_LOGITS
    model = build_checked(ModelSpec("undeclared", bfloat16_undeclared, "test"), case.config, case.weights())
    assert model.precision.name == "float32" and not model.precision_declared
    with checks.recording("p") as record:
        checks.judge_at(model, case)
        expected = oracle(case).logits(case.token_array())
        with pytest.raises(checks.PropertyFailure) as failure:
            checks.agree(model.logits(case.token_array()), expected, what="logits", model=model)
    message = str(failure.value)
    assert "model 'undeclared' (float32), logits" in message and "exceeds the float32 tolerance" in message
    assert "within the bfloat16 tolerance" in message and "declare precision = 'bfloat16'" in message
    assert record.behaves_like == "bfloat16"
