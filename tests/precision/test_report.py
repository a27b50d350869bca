"""The conformance report shows each model's precision class: in the header, the column heading,
the verdict line and the JSON; and for a model that declares none, the class its failures were
within (what it behaves like)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.report import html, render
from verifier.report.collect import Collector
from verifier.report.results import Header, ModelCard, Report, Result


def _report(card: ModelCard, *results: Result) -> Report:
    return Report(Header([card], {}, "ci", {}, "properties", "2026-01-01T00:00:00+00:00"), list(results))


def test_a_declared_class_is_in_the_header_the_column_and_the_verdict() -> None:
    card = ModelCard("m", "--model", {"gpt2": "logits"}, precision="bfloat16", declared=True)
    report = _report(card, Result("p", "m", "pass", worst_error_ratio=0.25, examples=3, precision="bfloat16"))
    text = render.text(report)
    assert "model      m (--model)\n             precision: bfloat16\n" in text
    assert "m (bfloat16): conforms (1 property run" in text
    assert next(line for line in text.splitlines() if line.startswith("property")).split() == [
        "property",
        "m",
        "(bfloat16)",
    ]
    assert "| property | m (bfloat16) |" in render.markdown(report)
    assert "<th>m (bfloat16)</th>" in html.html(report)
    again = Report.from_dict(json.loads(report.to_json()))
    assert (again.verdicts()[0].precision, again.header.models[0].declared) == ("bfloat16", True)


def test_an_undeclared_model_says_float32_and_what_its_failures_behave_like() -> None:
    card = ModelCard("m", "--model", {"gpt2": "logits"})
    report = _report(
        card,
        Result("a", "m", "fail", "numeric", examples=1, precision="float32", behaves_like="bfloat16"),
        Result("b", "m", "fail", "numeric", examples=1, precision="float32", behaves_like="bfloat16"),
        Result("c", "m", "fail", "a shape", examples=1, precision="float32"),
    )
    (verdict,) = report.verdicts()
    assert (verdict.precision, verdict.declared) == ("float32", False)
    assert verdict.behaves_like == "bfloat16 (2 of 3 failed properties)"
    text = render.text(report)
    assert "precision: float32 (declares none)" in text
    assert "m: FAILS (3 properties run: 0 pass, 3 fail; 0 skip; 3 examples); it declares no precision, and the " in text
    assert (
        "the errors of its failures follow bfloat16's rounding (2 of 3 failed properties): it behaves like bfloat16 "
        "(if it computes in bfloat16, declare precision = 'bfloat16')"
    ) in text


def test_failures_that_name_different_classes_leave_the_verdict_naming_none() -> None:
    """The verdict says only what every hinted failure says: notes naming tf32 and bfloat16 (the
    verdict once said bfloat16, the coarsest, beside a note saying tf32) make it name no class."""
    report = _report(
        ModelCard("m", "--model", {"gpt2": "logits"}),
        Result("a", "m", "fail", "numeric", examples=1, precision="float32", behaves_like="tf32"),
        Result("b", "m", "fail", "numeric", examples=1, precision="float32", behaves_like="bfloat16"),
    )
    (verdict,) = report.verdicts()
    assert verdict.behaves_like == ""
    assert "behaves like" not in render.text(report)


def test_the_collector_reads_the_class_and_what_it_behaves_like(tmp_path: Path) -> None:
    collector = Collector(None, tmp_path / "results.json")  # type: ignore[arg-type]
    props = [("model", "m"), ("examples", 2), ("precision", "float32"), ("behaves_like", "float16")]
    for when, outcome in (("setup", "passed"), ("call", "failed")):
        collector.pytest_runtest_logreport(
            pytest.TestReport("f.py::a[m]", ("f.py", 0, "a"), {}, outcome, "E  x", when, user_properties=props)
        )
    (result,) = collector.results.values()
    assert (result.precision, result.behaves_like) == ("float32", "float16")
