"""Declared deviations (`verifier.Deviation`), as a user's factory declares them, in one suite run:
a deviation that happens is "deviates (declared)" with its measured size, not "conforms" and not
"fails", and exits 0; one larger than declared, or on a family not declared, fails; one that did not
happen is reported; a malformed declaration is the spec's one-line error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.plugin.project import ROOT, Run, run
from tests.report.deviation_models import LOGITS, WHY
from verifier import Deviation
from verifier.plugin.registry import ModelSpec, PluginError
from verifier.report.results import NOT_SEEN

MODELS = "tests.report.deviation_models"


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any]]:
    reports = tmp_path_factory.mktemp("deviations")
    names = ("declared", "declared_too_small", "declared_on_llama", "correct_declaring")
    models = [a for name in names for a in ("--model", f"{MODELS}:{name}")]
    # The checkpoint profile: what is judged is the report, not how many examples found it; the ci profile's 20
    # examples a property (and their shrinking) took twice as long here.
    done = run(ROOT, "-m", "verifier", "check", *models, "--reports", str(reports), "--hypothesis-profile",
               "checkpoint", "--", "-p", "no:cacheprovider", "-k", "logits_agree or test_the_same_input",
               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    return done, json.loads((reports / "conformance.json").read_text())


def _results(report: dict[str, Any], model: str) -> dict[str, dict[str, Any]]:
    return {r["property"].split("::")[1]: r for r in report["results"] if r["model"] == f"{MODELS}:{model}"}


def _verdict(report: dict[str, Any], model: str) -> dict[str, Any]:
    return next(v for v in report["models"] if v["model"] == f"{MODELS}:{model}")


def test_a_declared_deviation_deviates_with_its_measured_size_and_the_rest_is_judged(checked: tuple[Run, dict]) -> None:
    done, report = checked
    logits = _results(report, "declared")[LOGITS]
    assert logits["outcome"] == "xfail", logits
    assert logits["detail"].startswith(f"deviates (declared): {WHY}; measured up to "), logits
    assert logits["worst_error_ratio"] > 1 and logits["examples"] > 0
    assert _results(report, "declared")["test_the_same_input_gives_the_same_output"]["outcome"] == "pass"
    verdict = _verdict(report, "declared")
    assert verdict["verdict"] == "deviates" and verdict["reason"].startswith(f"{LOGITS}: deviates (declared): {WHY}")
    line = f"{MODELS}:declared: deviates (2 properties run: 1 pass, 1 deviate (declared), 0 fail; 0 skip; "
    assert line in done.stdout, done


def test_a_deviation_larger_than_declared_or_on_another_family_fails(checked: tuple[Run, dict]) -> None:
    done, report = checked
    for model in ("declared_too_small", "declared_on_llama"):
        assert _results(report, model)[LOGITS]["outcome"] == "fail", (model, _results(report, model))
        assert _verdict(report, model)["verdict"] == "fails"
    assert done.returncode == 1 and report["verdict"] == "fails", done


def test_a_declared_deviation_that_did_not_happen_is_reported(checked: tuple[Run, dict]) -> None:
    _, report = checked
    logits = _results(report, "correct_declaring")[LOGITS]
    assert (logits["outcome"], logits["detail"]) == ("xpass", f"{NOT_SEEN}: {WHY}"), logits
    verdict = _verdict(report, "correct_declaring")
    assert verdict["verdict"] == "conforms" and f"{LOGITS}: {NOT_SEEN}: {WHY}" in verdict["reason"], verdict


@pytest.mark.slow  # a `verifier check` for its exit status alone: 4 s here (the verdicts are judged above)
def test_a_model_that_only_deviates_as_declared_exits_0(tmp_path: Path) -> None:
    done = run(ROOT, "-m", "verifier", "check", "--model", f"{MODELS}:declared", "--reports", str(tmp_path),
               "--hypothesis-profile", "checkpoint", "--", "-p", "no:cacheprovider", "-k", "logits_agree",
               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done
    assert "1 xfail: deviates as declared; reports written" in done.stdout, done


@pytest.mark.parametrize(
    ("declared", "message"),
    [("not a deviation", "expected a verifier.Deviation, or a tuple of them"),
     ((Deviation(LOGITS, WHY), "x"), "expected a verifier.Deviation")],
)  # fmt: skip
def test_a_malformed_declaration_is_the_spec_s_error(declared: Any, message: str) -> None:
    def build(config: Any, weights: Any) -> Any:
        raise AssertionError("never built")

    build.deviations = declared  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match=r"^model 'm' \(--model\): .*" + message):
        ModelSpec("m", build, "--model")


@pytest.mark.parametrize(
    ("args", "message"),
    [((LOGITS, " "), "expected a property's test name"), (("logits", WHY), "expected a property's test name"),
     ((LOGITS, WHY, ("gpt3",)), "families of"), ((LOGITS, WHY, ("llama",), 0.0), "must be above 0")],
)  # fmt: skip
def test_a_deviation_must_name_a_property_a_reason_families_and_a_positive_size(args: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Deviation(*args)
