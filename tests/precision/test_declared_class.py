"""A model is judged by the class it declares, and the class is named wherever it fails: an
implementation declared bfloat16 with one of the catalog's bugs (attention scaled by 1/d_head,
whose effect on the logits is far beyond bfloat16's bound) fails through the public path, the
message naming bfloat16; an undeclared model computing in bfloat16 fails as float32, and the
failure says it behaves like bfloat16."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.meta.suite_runs import mutant_spec
from verifier.analysis.precision import BFLOAT16, FLOAT16, TF32, Precision
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.contract import build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.cases import Case
from verifier.properties.oracle import oracle
from verifier.reference import NumpyModel
from verifier.report.inprocess import check


def test_a_bfloat16_implementation_with_a_catalog_bug_fails_naming_bfloat16() -> None:
    spec = mutant_spec("ScaleByDHead", "bfloat16")
    agreement = "test_logits_agree_with_the_oracle"
    report = check(spec, profile="ci", pytest_args=["-p", "no:cacheprovider", "-k", agreement])
    (failure,) = report.failures
    assert f"model {spec!r} (bfloat16), logits of" in failure.detail
    assert "exceeds the bfloat16 tolerance" in failure.detail
    (verdict,) = report.verdicts()
    assert (verdict.verdict, verdict.precision, verdict.declared) == ("fails", "bfloat16", True)
    assert failure.precision == "bfloat16"


def _undeclared(precision: Precision) -> Callable[[ModelConfig, Weights], NumpyModel]:
    """The reference computing at `precision` and declaring nothing."""

    def build(config: ModelConfig, weights: Weights) -> NumpyModel:
        return NumpyModel(config, weights, np.float32, rounding=precision.rounding)

    return build


bfloat16_undeclared = _undeclared(BFLOAT16)
float16_undeclared = _undeclared(FLOAT16)
tf32_undeclared = _undeclared(TF32)


def _tokens(config: ModelConfig, T: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(1).integers(0, config.vocab_size, T))


def _behaves_like(
    case: Case, factory: Callable[[ModelConfig, Weights], Any] = bfloat16_undeclared
) -> tuple[str, str | None]:
    """The failure message of an undeclared model's logits on `case` (localized by its trace where
    it traces, as the suite does), and the class recorded from it."""
    model = build_checked(ModelSpec("undeclared", factory, "test"), case.config, case.weights())
    assert model.precision.name == "float32" and not model.precision_declared
    tokens = case.token_array()
    with checks.recording("p") as record:
        checks.judge_at(model, case)
        o = oracle(case)
        with pytest.raises(checks.PropertyFailure) as failure:
            checks.agree(model.logits(tokens), o.logits(tokens), what="logits", model=model,
                         localize=checks.localizer(model, o, tokens))  # fmt: skip
        checks.record_failure(record, failure.value)
    message = str(failure.value)
    assert "model 'undeclared' (float32), logits" in message and "exceeds the float32 tolerance" in message
    assert record.behaves_like == failure.value.behaves_like  # what the report records is what the message says
    return message, record.behaves_like


SMALL = ModelConfig(
    "llama", vocab_size=61, n_ctx=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=40, norm_eps=1e-5,
    tie_embeddings=False,
)  # fmt: skip
GPT2 = SMALL.replace(family="gpt2", tie_embeddings=True)


def test_an_undeclared_model_computing_in_bfloat16_behaves_like_bfloat16() -> None:
    message, behaves_like = _behaves_like(Case(SMALL, 1, 3.0, _tokens(SMALL, 24)))
    assert (
        "its error is bfloat16's rounding (the size of the error of the reference rounded to bfloat16, 1x, at every "
        "position and at every traced stage) and within the bfloat16 tolerance"
    ) in message
    assert "behaves like bfloat16 here (if it computes in bfloat16, declare precision = 'bfloat16')" in message
    assert behaves_like == "bfloat16"


@pytest.mark.parametrize("config", [SMALL, GPT2], ids=["llama", "gpt2"])
def test_an_undeclared_model_computing_in_float16_behaves_like_float16_not_tf32(config: ModelConfig) -> None:
    """float16 and tf32 have the same eps, and the old hint named the finest class whose bound held
    the error: tf32, for float16 logits (on the llama case; and bfloat16's bound holds it too)."""
    message, behaves_like = _behaves_like(Case(config, 1, 0.3, _tokens(config, 24)), float16_undeclared)
    assert behaves_like == "float16" and "declare precision = 'float16'" in message
    assert "tf32" not in message and "bfloat16" not in message


def test_an_undeclared_model_computing_in_tf32_behaves_like_tf32() -> None:
    message, behaves_like = _behaves_like(Case(SMALL, 1, 0.3, _tokens(SMALL, 24)), tf32_undeclared)
    assert behaves_like == "tf32" and "declare precision = 'tf32'" in message


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # float16's emulation overflows
def test_a_case_beyond_float16_s_range_does_not_say_the_model_behaves_like_float16() -> None:
    """At weight scale 10 float16's emulation overflows, so its bound is infinite and its error
    profile undefined: the message must name bfloat16, not float16."""
    message, behaves_like = _behaves_like(Case(GPT2.replace(n_heads=1, n_kv_heads=1), 1, 10.0, _tokens(GPT2, 12)))
    assert "float16 tolerance inf" not in message and "within the bfloat16 tolerance" in message
    assert behaves_like == "bfloat16"


@pytest.mark.parametrize(("dtype", "expected"), [("bfloat16", "bfloat16"), ("float16", "float16")])
@pytest.mark.parametrize("config", [SMALL, GPT2], ids=["llama", "gpt2"])
def test_transformers_in_a_narrow_dtype_declaring_nothing_gets_its_class(
    config: ModelConfig, dtype: str, expected: str
) -> None:
    """An implementation written independently of the reference (transformers, its trace included)
    with the precision its built-in declares taken away."""
    pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install 'lm-verifier[transformers]')"
    )
    from verifier.plugin.adapters import hf_transformers

    build = {"bfloat16": hf_transformers.build_bfloat16, "float16": hf_transformers.build_float16}[dtype]

    def undeclared(config: ModelConfig, weights: Weights) -> Any:
        model = build(config, weights)
        model.precision = None
        return model

    message, behaves_like = _behaves_like(Case(config, 1, 0.3, _tokens(config, 24)), undeclared)
    assert behaves_like == expected, message
