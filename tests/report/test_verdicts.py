"""Honest verdicts: a model conforms only if its properties ran examples on it; a property that
compared nothing is a skip with its reason; notes carry whole messages, and a contract breach met
by several properties is one note. The suite runs as a user runs it (`verifier check --model`)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.plugin.project import ROOT, Run, run
from verifier.properties.checks import Record
from verifier.report import render
from verifier.report.collect import Collector
from verifier.report.inprocess import check as check_in_process
from verifier.report.results import Header, ModelCard, Report, Result

MODELS = "tests.report.verdict_models"


def check(reports: Path, *models: str, k: str, profile: str = "dev") -> tuple[Run, dict]:
    """`verifier check` on the real suite, the properties matching `k` only; its run and JSON report."""
    args = [a for m in models for a in ("--model", f"{MODELS}:{m}")]
    done = run(ROOT, "-m", "verifier", "check", *args, "--reports", str(reports), "--hypothesis-profile", profile,
               "--", "-p", "no:cacheprovider", "-k", k, env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    return done, json.loads((reports / "conformance.json").read_text())


def _by_property(report: dict, model: str) -> dict[str, dict]:
    return {r["property"].split("::")[1]: r for r in report["results"] if r["model"] == f"{MODELS}:{model}"}


def _verdict(report: dict, model: str) -> dict:
    return next(v for v in report["models"] if v["model"] == f"{MODELS}:{model}")


def test_a_model_that_refuses_every_config_is_untested_and_exits_1(tmp_path: Path) -> None:
    # The case: the model-independent test passes, every property of the model skips.
    done, report = check(tmp_path, "refuses_everything", k="test_logits_agree_with_the_oracle or presets_have")
    assert done.returncode == 1, done
    assert report["counts"] == {"pass": 1, "skip": 1} and report["verdict"] == "untested", report
    verdict = _verdict(report, "refuses_everything")
    assert (verdict["verdict"], verdict["run"], verdict["examples"]) == ("untested", 0, 0)
    # Kinds refused for the same reason are named together: the probes of 2 heads have d_model 8, GLM's
    # (heads 8 wide) 32, the others 16.
    for kinds, d_model in (
        ("gpt2, llama", 8),
        (
            "llama-gqa, llama3, mistral, qwen2, qwen3, gemma, gemma2, mixtral, qwen2_moe, phi3, qwen3_moe, smollm3, "
            "olmo2",
            16,
        ),
        ("glm", 32),
    ):
        refusal = f"{kinds}: unsupported (this implementation runs d_model 768 only, not {d_model})"
        assert refusal in verdict["reason"], verdict
    assert "it refused every config family probed" in verdict["reason"]
    assert f"{MODELS}:refuses_everything: UNTESTED (0 properties run" in done.stdout, done
    assert "1 pass, 1 skip: untested: not conforming; reports written: " in done.stdout, done


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict]:
    # The model that refuses every draw runs one property: each refusing property costs the whole search.
    properties = ("(attention_probabilities or articles_table or test_logits_agree_with_the_oracle or same_input)"
                  " and (test_logits_agree_with_the_oracle or not runs_only_the_probes)")  # fmt: skip
    models = ("runs_only_the_probes", "trace_without_attention", "wrong_shape")
    return check(tmp_path_factory.mktemp("verdicts"), *models, k=properties)


def test_a_trace_without_probs_skips_the_probabilities_property_with_the_reason(checked: tuple[Run, dict]) -> None:
    _, report = checked
    probs = _by_property(report, "trace_without_attention")[
        "test_attention_probabilities_are_zero_above_the_diagonal_and_rows_sum_to_1"
    ]
    assert probs["outcome"] == "skip", probs
    assert re.fullmatch(
        rf"compared nothing in \d+ examples on model '{MODELS}:trace_without_attention': "
        r"the trace has no attention probabilities \(no layers.<i>.probs stage\)",
        probs["detail"],
    ), probs


def test_a_correct_model_whose_trace_leaves_out_scores_passes_and_conforms(checked: tuple[Run, dict]) -> None:
    _, report = checked
    results = _by_property(report, "trace_without_attention")
    assert results["test_gpt2_124m_on_5_tokens_reproduces_the_articles_table"]["outcome"] == "pass"
    assert results["test_logits_agree_with_the_oracle"]["outcome"] == "pass"
    assert results["test_logits_agree_with_the_oracle"]["examples"] >= 8  # the dev profile's budget
    verdict = _verdict(report, "trace_without_attention")
    assert (verdict["verdict"], verdict["passed"], verdict["failed"], verdict["skipped"]) == ("conforms", 3, 0, 1)
    assert verdict["examples"] == sum(r["examples"] for r in results.values() if r["outcome"] == "pass")


def test_every_draw_refused_is_a_skip_saying_so_and_the_model_is_untested(checked: tuple[Run, dict]) -> None:
    done, report = checked
    agree = _by_property(report, "runs_only_the_probes")["test_logits_agree_with_the_oracle"]
    assert agree["outcome"] == "skip", agree
    assert agree["detail"] == (
        f"no example ran on model '{MODELS}:runs_only_the_probes': every drawn config was refused "
        "(the factory: only the probe configs) (Hypothesis: Unsatisfiable)"
    )
    assert _verdict(report, "runs_only_the_probes")["verdict"] == "untested"
    assert done.returncode == 1 and report["verdict"] == "fails", done


def test_a_breach_met_by_two_properties_is_one_whole_note_naming_both(checked: tuple[Run, dict]) -> None:
    done, report = checked
    results = _by_property(report, "wrong_shape")
    both = ("test_logits_agree_with_the_oracle", "test_the_same_input_gives_the_same_output")
    rules = {results[p]["contract_rule"] for p in both}
    assert rules == {"shape"}, results
    lines = done.stdout.splitlines()
    breach = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"model '{MODELS}:wrong_shape' broke the "
                                                                           "contract rule 'shape'")]  # fmt: skip
    assert len(breach) == 1, lines
    heading, message = lines[breach[0] - 1], lines[breach[0]]  # the failure's paragraph: heading, whole message
    assert re.fullmatch(
        rf"\[\d+\] FAIL {MODELS}:wrong_shape, 2 properties: test_agreement.py::test_logits_agree_with_the_oracle, "
        "test_agreement.py::test_the_same_input_gives_the_same_output",
        heading,
    ), heading
    assert re.search(
        r" in logits\(tokens int64 \[\d+\]\): returned shape \[\d+, \d+\], expected \[\d+, \d+\]$", message
    )
    assert len(message) > 250 and "(logits(tokens [T]) is [T, V]" in message  # whole: rule, call, found, expected


def test_plain_pytest_prints_each_model_s_verdict_and_puts_it_in_the_junit_xml(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    done = run(ROOT, "-m", "pytest", "properties", "-p", "no:cacheprovider", "-k", "test_logits_agree",
               "--model", "numpy", "--model", f"{MODELS}:refuses_everything", f"--junitxml={junit}",
               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done  # pytest's own status: nothing failed
    summary = done.stdout.split("lm-verifier: verdicts per model")[1]
    assert re.search(r"\nnumpy: conforms \(1 property run: 1 pass, 0 fail; 0 skip; \d+ examples\)\n", summary), done
    assert (
        f"\n{MODELS}:refuses_everything: UNTESTED (0 properties run: 0 pass, 0 fail; 1 skip; 0 examples); " in summary
    )
    found = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert found["verifier.numpy.verdict"] == "conforms" and int(found["verifier.numpy.examples"]) > 0
    assert found[f"verifier.{MODELS}:refuses_everything.verdict"] == "untested"
    assert "it refused every config family probed" in found[f"verifier.{MODELS}:refuses_everything.reason"]
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name", "").endswith("[numpy]"))
    assert int(next(p.get("value") for p in case.iter("property") if p.get("name") == "examples")) > 0


def _report(*results: Result, probes: dict[str, str] | None = None) -> Report:
    card = ModelCard("m", "--model", probes or {"gpt2": "logits", "llama": "logits"})
    return Report(Header([card], {}, "ci", {}, "properties", "2026-01-01T00:00:00+00:00"), list(results))


def test_a_model_independent_pass_does_not_make_a_model_conform() -> None:
    refused = {"gpt2": "unsupported (d_ff fixed)", "llama": "unsupported (no RoPE)"}
    report = _report(Result("totals", None, "pass"), Result("p", "m", "skip", "runs no config"), probes=refused)
    (verdict,) = report.verdicts()
    assert (verdict.verdict, verdict.run, verdict.skipped) == ("untested", 0, 1)
    assert verdict.reason == (
        "its only property ran no example (it skipped): it refused every config family probed "
        "(gpt2: unsupported (d_ff fixed); llama: unsupported (no RoPE))"
    )
    assert not report.conforms and report.verdict == "untested"
    assert _report(Result("p", "m", "pass", examples=3)).verdict == "conforms"
    assert _report(Result("p", "m", "pass"), Result("totals", None, "fail")).verdict == "fails"
    assert _report().verdicts()[0].reason == "no property ran on it (see the skip reasons)"


def test_notes_are_whole_and_a_breach_is_one_note_listing_its_properties() -> None:
    long = "model 'm' broke the contract rule 'shape' (" + "x" * 400 + ") in logits(tokens int64 [5]): found [5, 3]"
    other = long.replace("[5]", "[2, 5]")
    report = _report(
        Result("a", "m", "fail", long, contract_rule="shape", examples=1),
        Result("b", "m", "fail", other, contract_rule="shape", examples=1),
        Result("c", "m", "fail", "a numeric failure", examples=4),
    )
    t = render.table(report)
    assert t.cells == {("a", "m"): "FAIL [1]", ("b", "m"): "FAIL [1]", ("c", "m"): "FAIL [2]"}
    assert t.note_heading(1) == "m, 2 properties: a, b"
    text = render.text(report, [Path("r/conformance.md")])
    assert f"[1] FAIL m, 2 properties: a, b\n    {long}\n" in text
    assert text.endswith("3 fail: does not conform; reports written: r/conformance.md")
    assert "m: FAILS (3 properties run: 0 pass, 3 fail; 0 skip; 6 examples)" in text
    md = render.markdown(report)
    assert md.startswith("# Conformance report\n\n**3 fail: does not conform**\n\n- m: FAILS (3 properties run")


def test_the_collector_reads_the_examples_and_the_rule_broken(tmp_path: Path) -> None:
    collector = Collector(None, tmp_path / "results.json")  # type: ignore[arg-type]
    props = [("model", "m"), ("examples", 7), ("contract_rule", "finite")]
    for when, outcome in (("setup", "passed"), ("call", "failed")):
        collector.pytest_runtest_logreport(
            pytest.TestReport("f.py::a[m]", ("f.py", 0, "a"), {}, outcome, "E  broke", when, user_properties=props)
        )
    (result,) = collector.results.values()
    assert (result.outcome, result.examples, result.contract_rule) == ("fail", 7, "finite")


def test_the_reason_a_property_compared_nothing_says_what_ran_and_what_was_refused() -> None:
    record = Record("p")
    assert record.why_nothing_compared("m") == "no example ran on model 'm'"
    for reason in ("a", "b", "c", "d", "a"):
        record.refused[reason] = record.by_model[reason] = None
    record.refused["a pinned case outside the model's declared shapes"] = None
    assert record.why_nothing_compared("m") == (
        "no example ran on model 'm': every drawn config was refused (a; b; c; and 2 more)"
    )
    record.examples = 4
    record.uncompared["the trace has no probs"] = None
    assert record.why_nothing_compared("m") == (  # cases outside its shapes do not matter when others ran
        "compared nothing in 4 examples on model 'm': the trace has no probs; refused: a; b; c; and 1 more"
    )


def test_a_property_failing_on_several_pinned_examples_reports_the_suite_s_message() -> None:
    """Two of the agreement property's pinned examples fail this mutant with distinct errors:
    Hypothesis raises them as one ExceptionGroup, whose title was all the report said (the slow
    tier's mutant runs failed on it: "Hypothesis found 2 distinct failures in explicit examples")."""
    from tests.meta.suite_runs import mutant_spec

    agreement = "test_logits_agree_with_the_oracle"
    report = check_in_process(
        mutant_spec("OutputProjectionTransposed"), profile="ci", pytest_args=["-p", "no:cacheprovider", "-k", agreement]
    )
    (failure,) = report.failures
    assert failure.detail.startswith(
        f"test_logits_agree_with_the_oracle: model {mutant_spec('OutputProjectionTransposed')!r} (float32), logits"
    ), failure.detail
    assert "first divergent stage: layer 0 attn_out" in failure.detail
    assert failure.detail.endswith("distinct failures Hypothesis found)"), failure.detail
    assert failure.case.startswith("config = ModelConfig(")
