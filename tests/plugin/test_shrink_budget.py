"""`--shrink-seconds`: how long Hypothesis may shrink one property's failure before it reports the smallest
case found so far (issue 47: a failure found in seconds was shown minutes later, all of it shrinking). It
sets Hypothesis's own budget (`engine.MAX_SHRINKING_SECONDS`, made to be set) for the run, and puts it back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis.internal.conjecture import engine

import verifier
from verifier import ModelConfig, NumpyModel, Weights
from verifier.report.suite import PytestOptionError

QUICK = ["-p", "no:cacheprovider", "-k", "test_logits_agree_with_the_oracle"]


def test_the_budget_holds_while_the_models_run_and_is_put_back_after() -> None:
    seen: list[float] = []

    def build(config: ModelConfig, weights: Weights) -> NumpyModel:
        seen.append(engine.MAX_SHRINKING_SECONDS)
        return NumpyModel(config, weights, np.float64)

    before = engine.MAX_SHRINKING_SECONDS
    report = verifier.check(build, profile="checkpoint", pytest_args=[*QUICK, "--shrink-seconds", "2.5"])
    assert report.verdict == "conforms" and seen and set(seen) == {2.5}, (report.verdict, set(seen))
    assert before == engine.MAX_SHRINKING_SECONDS


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_budget_that_is_not_positive_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(PytestOptionError):
        verifier.check("numpy", pytest_args=[*QUICK, "--shrink-seconds", value])
    assert f"--shrink-seconds must be a positive number of seconds, found {float(value):g}" in capsys.readouterr().err
