"""`verifier check`: run on a throwaway suite in a copy of the skeleton (the real properties are
written elsewhere), with a correct model and a wrong one, as a user runs it; and its parts."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.plugin.project import ROOT, junit_cases, make_project, run
from verifier.cli import main
from verifier.plugin.probes import PROBE_KINDS
from verifier.report import plot, render
from verifier.report.collect import Collector, property_name
from verifier.report.output import plot_path
from verifier.report.results import Header, ModelCard, Report, Result
from verifier.report.suite import SuiteNotFound, default_suite, find_suite

# A stand-in for the real suite: one differential property that localizes its failures by a trace
# and records what the report reads, one that needs a capability no model here has, one model-free.
THROWAWAY_SUITE = """
    import numpy as np
    import pytest
    from verifier.analysis import tolerance
    from verifier.plugin.adapters.reference import build_float64
    from verifier.plugin.contract import build_checked
    from verifier.plugin.probes import PROBE_CONFIGS
    from verifier.model.weights import init_weights

    CONFIG = PROBE_CONFIGS["gpt2"]

    def test_logits_agree_with_the_oracle(model_spec, record_property):
        weights = init_weights(CONFIG, seed=1)
        model = build_checked(model_spec, CONFIG, weights)
        oracle = build_float64(CONFIG, weights)
        tokens = np.arange(6)
        ratio = tolerance.error_ratio(model.logits(tokens), oracle.logits(tokens))
        record_property("worst_error_ratio", ratio)
        if ratio > 1:
            actual, expected = model.trace(tokens), oracle.trace(tokens)
            errors = [(s, tolerance.max_error(actual[s], e), tolerance.bound(e)) for s, e in expected.items()]
            first = next(stage for stage, error, bound in errors if error > bound)
            record_property("first_divergent_stage", first)
            record_property("stage_errors", errors)
            pytest.fail(f"logits differ from the oracle: error / tolerance {ratio:.3g}; first divergent stage {first}")

    def test_greedy_continuations_agree(model_spec):
        model = build_checked(model_spec, CONFIG, init_weights(CONFIG))
        if reason := model.lacks("greedy"):
            pytest.skip(reason)

    def test_model_independent():
        pass
"""

# A model that is wrong from its first norm on: LayerNorm with eps 1e-2 instead of the config's.
WRONG_MODEL = """
    from verifier.reference import NumpyModel

    def build(config, weights):
        return NumpyModel(config.replace(norm_eps=1e-2), weights)
"""


# A correct model of GPT-2 only, which refuses every other family.
GPT2_ONLY = """
    from verifier import Unsupported
    from verifier.reference import NumpyModel

    def build(config, weights):
        if config.family != "gpt2":
            raise Unsupported(f"GPT-2 only, not {config.family}")
        return NumpyModel(config, weights)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = {"properties/test_throwaway.py": THROWAWAY_SUITE, "wrong_model.py": WRONG_MODEL, "gpt2_only.py": GPT2_ONLY}
    return make_project(tmp_path_factory.mktemp("check"), files)


def test_a_model_that_refuses_families_conforms_on_the_others_only_and_says_so(project: Path) -> None:
    out = project / "out-refusing"
    done = run(project, "-m", "verifier", "check", "--suite", "properties", "--model", "gpt2_only:build",
               "--reports", str(out), "--hypothesis-profile", "dev")  # fmt: skip
    assert done.returncode == 0, done
    not_tested = f"not tested on {', '.join(k for k in PROBE_KINDS if k != 'gpt2')}: refused by the model"
    assert re.search(rf"\ngpt2_only:build: conforms \(.*\); {not_tested}", done.stdout), done
    (verdict,) = json.loads((out / "conformance.json").read_text())["models"]
    assert verdict["verdict"] == "conforms" and verdict["reason"].startswith(not_tested), verdict


def test_a_failing_model_gets_the_table_the_files_the_plot_and_exit_status_1(project: Path) -> None:
    out = project / "out"
    done = run(
        project,
        *("-m", "verifier", "check", "--suite", "properties", "--model", "numpy", "--model", "wrong_model:build"),
        *("--reports", str(out), "--plot", "--hypothesis-profile", "dev", "--", f"--junitxml={out / 'junit.xml'}"),
    )
    assert done.returncode == 1, done
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in done.stdout.splitlines())}
    assert rows["property"] == ["numpy", "wrong_model:build", "(no model)"], done
    numpy, wrong, no_model = rows["test_throwaway.py::test_logits_agree_with_the_oracle"]
    assert numpy.startswith("pass ") and float(numpy.split()[1]) < 1, numpy
    assert wrong.startswith("FAIL ") and float(wrong.split()[1]) > 1 and wrong.endswith(" [1]"), wrong
    assert no_model == "-"
    assert rows["test_throwaway.py::test_greedy_continuations_agree"] == ["skip [2]", "skip [3]", "-"]
    assert "test_throwaway.py::test_model_independent" not in rows  # passed on every model: counted, not shown
    assert "(and 1 property that passed on every model: the whole table is in the report files)" in done.stdout
    assert wrong.startswith("FAIL ") and " from layers.0.attn_norm [1]" in wrong, wrong
    assert (
        "[1] FAIL test_throwaway.py::test_logits_agree_with_the_oracle / wrong_model:build: worst error "
    ) in done.stdout, done
    assert (
        "x the float32 bound; first divergent stage layers.0.attn_norm\n    Failed: logits differ from the oracle"
        in (done.stdout)
    )
    assert (
        "[2] test_throwaway.py::test_greedy_continuations_agree / numpy: model 'numpy' has no 'greedy'" in done.stdout
    )
    assert "hypothesis profile dev (max_examples=8" in done.stdout, done
    assert (
        "wrong_model:build (--model)" in done.stdout
        and f"{', '.join(PROBE_KINDS)}: logits, decode, trace" in done.stdout
    )
    assert "1 fail, 2 pass, 2 skip: does not conform" in done.stdout, done

    report = json.loads((out / "conformance.json").read_text())
    assert report["counts"] == {"fail": 1, "pass": 2, "skip": 2} and report["conforms"] is False
    failed = next(r for r in report["results"] if r["outcome"] == "fail")
    assert failed["model"] == "wrong_model:build" and failed["first_divergent_stage"] == "layers.0.attn_norm"
    (embed, embed_error, embed_bound), (norm, norm_error, norm_bound) = failed["stage_errors"][:2]
    assert (embed, norm) == ("embed", "layers.0.attn_norm")
    assert embed_error <= embed_bound and norm_error > norm_bound
    assert {"numpy", "torch", "transformers", "hypothesis", "pytest", "python"} <= set(report["header"]["versions"])
    assert "| `test_throwaway.py::test_logits_agree_with_the_oracle` | pass" in (out / "conformance.md").read_text()
    svg = out / "stage-errors_wrong_model-build_test_throwaway.py-test_logits_agree_with_the_oracle.svg"
    assert svg.read_text().startswith("<svg ") and "first divergent stage: layers.0.attn_norm" in svg.read_text()
    assert (
        junit_cases(out / "junit.xml")["test_logits_agree_with_the_oracle[wrong_model:build]"]["outcome"] == "failure"
    )


@pytest.mark.slow
def test_a_conforming_model_exits_0_also_under_xdist(project: Path) -> None:
    out = project / "out-xdist"
    done = run(
        project,
        *("-m", "verifier", "check", "--suite", "properties", "--model", "numpy", "--reports", str(out)),
        *("--", "-n", "2", "-k", "oracle or independent"),
    )
    assert done.returncode == 0, done
    assert "2 pass: conforms" in done.stdout, done
    results = json.loads((out / "conformance.json").read_text())["results"]
    assert [r["property"] for r in results] == [  # in the suite's order, whichever worker finished first
        "test_throwaway.py::test_logits_agree_with_the_oracle",
        "test_throwaway.py::test_model_independent",
    ]
    assert results[0]["worst_error_ratio"] < 1


def test_a_model_spec_that_names_nothing_exits_2_with_pytest_s_reason(project: Path) -> None:
    done = run(project, "-m", "verifier", "check", "--suite", "properties", "--model", "wrong_modle:build")
    assert done.returncode == 2, done
    assert "ERROR: --model 'wrong_modle:build'" in done.stderr, done  # pytest's own usage error
    assert "--model 'wrong_modle:build': cannot import module 'wrong_modle'" in done.stderr, done
    assert "verifier check: error: pytest stopped before the suite ran (a usage error)" in done.stderr, done


def test_a_missing_suite_is_a_one_line_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--suite", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"verifier check: error: no property suite at {tmp_path / 'nowhere'} (--suite); ")
    assert err.count("\n") == 1


def test_the_suite_is_found_by_the_option_the_variable_or_beside_the_package(tmp_path: Path) -> None:
    assert default_suite() == ROOT / "properties"  # the editable install maps verifier.properties there
    suite, empty = tmp_path / "suite", tmp_path / "empty"
    (suite / "rope").mkdir(parents=True)
    (suite / "rope" / "test_x.py").write_text("")
    empty.mkdir()
    assert find_suite(str(suite), {}) == find_suite(None, {"VERIFIER_SUITE": str(suite)}) == suite
    with pytest.raises(SuiteNotFound, match=r"holds no test_\*\.py files: not a property suite"):
        find_suite(str(empty), {"VERIFIER_SUITE": str(suite)})


@pytest.mark.parametrize(
    ("nodeid", "model", "expected"),
    [
        ("properties/test_a.py::test_x[numpy]", "numpy", "test_a.py::test_x"),
        ("properties/test_a.py::test_x[numpy-gpt2]", "numpy", "test_a.py::test_x[gpt2]"),
        ("properties/test_a.py::test_x[gpt2-my-model-3]", "my-model", "test_a.py::test_x[gpt2-3]"),
        ("test_a.py::TestK::test_x[m:build]", "m:build", "test_a.py::TestK::test_x"),
        ("properties/test_a.py::test_x[gpt2]", None, "test_a.py::test_x[gpt2]"),
        ("properties/test_a.py::test_x", None, "test_a.py::test_x"),
    ],
)
def test_the_property_name_leaves_the_model_out(nodeid: str, model: str | None, expected: str) -> None:
    assert property_name(nodeid, model) == expected


def _report(*results: Result) -> Report:
    card = ModelCard("numpy", "built-in", {"gpt2": "logits", "llama": "logits"})
    header = Header([card], {"numpy": "2"}, "ci", {"max_examples": "20"}, "properties", "2026-01-01T00:00:00+00:00")
    return Report(header, list(results))


def test_one_reason_for_several_properties_of_a_model_is_one_note() -> None:
    reason = "model 'm' runs no llama config"
    skips = [Result(p, "m", "skip", reason) for p in ("rope_a", "rope_b")]
    t = render.table(_report(*skips, Result("rope_a", "numpy", "skip", "other")))
    assert t.cells == {("rope_a", "numpy"): "skip [1]", ("rope_a", "m"): "skip [2]", ("rope_b", "m"): "skip [2]"}
    assert [t.note_heading(n) for n in (1, 2)] == ["rope_a / numpy", "m, 2 properties"]


def test_a_run_that_only_skips_does_not_conform() -> None:
    report = _report(Result("p", "numpy", "skip", "no decode"))
    assert not report.conforms
    assert report.verdict == "untested"
    assert render.summary(report) == "1 skip: untested: not conforming"
    assert _report(Result("p", "numpy", "pass"), Result("q", "numpy", "skip")).conforms


def test_the_report_survives_standard_json_and_renders_pipes_and_long_messages() -> None:
    long = "model 'x' broke | the rule\n  Falsifying example: tokens=[1, 2]"
    stage_errors = [("embed", 0.0, 1e-5), ("layers.0.q", float("inf"), 1e-5)]
    failed = Result("p", "numpy", "fail", long, worst_error_ratio=31.0, stage_errors=stage_errors)
    report = _report(failed, Result("q", None, "pass", worst_error_ratio=float("inf")))
    text = report.to_json()
    assert "Infinity" not in text and '"inf"' in text
    assert Report.from_dict(json.loads(text)) == report
    md = render.markdown(report)
    assert "| `p` | FAIL 31 [1] | - |" in md and "| `q` | - | pass inf |" in md
    assert "1. p / numpy (fail): model 'x' broke \\| the rule" in md and "   Falsifying example: tokens=[1, 2]" in md
    assert "  - `gpt2, llama: logits`" in md
    text = render.text(report)
    assert "[1] FAIL p / numpy: worst error 31x the float32 bound\n    model 'x' broke | the rule\n" in text
    assert "\n      Falsifying example: tokens=[1, 2]\n" in text


def test_the_plot_draws_each_stage_s_ratio_on_the_log_axis_as_svg() -> None:
    rows = [("embed", 0.0, 1e-5), ("layers.0.attn_norm", 3e-2, 1e-5), ("layers.0.q", float("inf"), 1e-5)]
    result = Result("p[<a&b>]", "m", "fail", first_divergent_stage="layers.0.attn_norm", stage_errors=rows)
    svg = ET.fromstring(plot.stage_errors_svg(result))  # well-formed, the names escaped
    namespace = "{http://www.w3.org/2000/svg}"
    bars = {
        bar.findtext(f"{namespace}title"): bar
        for bar in svg.iter(f"{namespace}rect")
        if bar.find(f"{namespace}title") is not None
    }
    assert list(bars) == ["embed: 0", "layers.0.attn_norm: 3e+03", "layers.0.q: infinite (wrong shape)"]
    colors = [bar.get("fill") for bar in bars.values()]
    assert colors == ["#1f77b4", "#d62728", "url(#hatch)"]  # within the bound, beyond it, the wrong shape
    heights = [float(bar.get("height")) for bar in bars.values()]
    assert heights[0] == 0 and 0 < heights[1] < heights[2]  # 0 at the floor, the wrong shape to the top
    texts = [t.text for t in svg.iter(f"{namespace}text")]
    assert "m: p[<a&b>]" in texts and "| first divergent stage: layers.0.attn_norm" in texts


def test_plot_file_names_are_safe() -> None:
    name = plot_path(Path("r"), Result("test_a.py::test_x[gpt2]", "pkg.mod:build", "fail")).name
    assert name == "stage-errors_pkg.mod-build_test_a.py-test_x-gpt2.svg"


def _phase(nodeid: str, when: str, outcome: str, longrepr: object = None, **extra: object) -> pytest.TestReport:
    report = pytest.TestReport(
        nodeid, ("f.py", 0, nodeid), {}, outcome, longrepr, when, user_properties=[("model", "m")]
    )
    for name, value in extra.items():
        setattr(report, name, value)
    return report


def test_the_collector_turns_the_phases_of_each_test_into_one_outcome(tmp_path: Path) -> None:
    collector = Collector(None, tmp_path / "results.json")  # type: ignore[arg-type]
    phases = [
        _phase("f.py::a[m]", "setup", "failed", "E   RuntimeError: fixture broke"),
        _phase("f.py::b[m]", "setup", "passed"),
        _phase("f.py::b[m]", "call", "passed"),
        _phase("f.py::b[m]", "teardown", "failed", "E   OSError: cannot remove"),
        _phase("f.py::c[m]", "setup", "passed"),
        _phase("f.py::c[m]", "call", "skipped", ("f.py", 3, "reason"), wasxfail="known bug"),
        _phase("f.py::d[m]", "setup", "passed"),  # the run stopped here
        _phase("f.py::e[m]", "setup", "skipped", ("f.py", 5, "Skipped: model 'm' has no 'decode' capability")),
    ]
    for report in phases:
        collector.pytest_runtest_logreport(report)
    found = {r.property: (r.model, r.outcome, r.detail) for r in collector.results.values()}
    assert found == {
        "f.py::a": ("m", "error", "setup failed: RuntimeError: fixture broke"),  # pytest's "E   " margin dropped
        "f.py::b": ("m", "error", "teardown failed: OSError: cannot remove"),
        "f.py::c": ("m", "xfail", "known bug"),
        "f.py::d": ("m", "error", "the test did not finish"),
        "f.py::e": ("m", "skip", "model 'm' has no 'decode' capability"),
    }


# A stand-in property over every family: each probe kind's config (its switches on), judged by the oracle.
EVERY_FAMILY_SUITE = """
    import numpy as np
    import pytest
    from verifier.model.weights import init_weights
    from verifier.plugin.contract import build_checked
    from verifier.plugin.probes import PROBE_CONFIGS
    from verifier.properties.oracle import Oracle

    @pytest.mark.parametrize("kind", PROBE_CONFIGS)
    def test_logits_agree_with_the_oracle(model_spec, kind):
        config = PROBE_CONFIGS[kind]
        weights = init_weights(config, seed=7, scale=0.3)
        tokens = np.random.default_rng(7).integers(0, config.vocab_size, config.n_ctx)
        model = build_checked(model_spec, config, weights)
        found = Oracle(config, weights).logits(tokens).compare(model.logits(tokens))
        assert found.ok, f"{kind}: {found}"
"""


@pytest.mark.slow  # transformers built on each family's probe config, in a subprocess: 8 s here
def test_the_built_in_models_conform_on_every_family_and_a_port_ignoring_the_switches_fails(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    project = make_project(tmp_path_factory.mktemp("families"), {"properties/test_families.py": EVERY_FAMILY_SUITE})
    out = project / "out"
    ignoring = "tests.plugin.ignoring:build"
    models = [a for m in ("numpy", "transformers", ignoring) for a in ("--model", m)]
    done = run(project, "-m", "verifier", "check", "--suite", "properties", *models, "--reports", str(out),
               "--hypothesis-profile", "dev")  # fmt: skip
    assert done.returncode == 1, done
    report = json.loads((out / "conformance.json").read_text())
    verdicts = {v["model"]: v for v in report["models"]}
    assert verdicts["numpy"]["verdict"] == verdicts["transformers"]["verdict"] == "conforms", verdicts
    assert verdicts["numpy"]["passed"] == verdicts["transformers"]["passed"] == len(PROBE_KINDS)
    # test ids are [model-kind]: each kind's outcome for the port
    outcomes = {r["nodeid"].split("[")[1].rstrip("]").replace(ignoring, "").strip("-"): r["outcome"]
                for r in report["results"] if r["model"] == ignoring}  # fmt: skip
    assert verdicts[ignoring]["verdict"] == "fails"
    assert outcomes == {kind: "pass" if kind in ("gpt2", "llama", "llama-gqa") else "fail" for kind in PROBE_KINDS}


# Two properties a wrong model fails, for `--model-maxfail`.
TWO_PROPERTIES = """
    import numpy as np
    from verifier.model.weights import init_weights
    from verifier.plugin.adapters.reference import build_float64
    from verifier.plugin.contract import build_checked
    from verifier.plugin.probes import PROBE_CONFIGS

    CONFIG = PROBE_CONFIGS["gpt2"]

    def _agrees(model_spec, T):
        weights = init_weights(CONFIG, seed=1)
        model, oracle = build_checked(model_spec, CONFIG, weights), build_float64(CONFIG, weights)
        np.testing.assert_allclose(model.logits(np.arange(T)), oracle.logits(np.arange(T)), atol=1e-4)

    def test_a(model_spec):
        _agrees(model_spec, 4)

    def test_b(model_spec):
        _agrees(model_spec, 6)
"""


def test_model_maxfail_stops_a_model_at_its_first_failures_and_the_others_go_on(tmp_path: Path) -> None:
    project = make_project(tmp_path, {"properties/test_two.py": TWO_PROPERTIES, "wrong_model.py": WRONG_MODEL})
    outcomes = {}
    for limit in ("0", "1"):
        junit = tmp_path / f"junit-{limit}.xml"
        done = run(project, "-m", "pytest", "properties", "-p", "no:cacheprovider", "--model", "wrong_model:build",
                   "--model", "numpy", "--model-maxfail", limit, f"--junitxml={junit}")  # fmt: skip
        assert done.returncode == 1, done
        outcomes[limit] = junit_cases(junit)
    assert {name: case["outcome"] for name, case in outcomes["0"].items()} == {
        "test_a[wrong_model:build]": "failure", "test_b[wrong_model:build]": "failure",
        "test_a[numpy]": "passed", "test_b[numpy]": "passed",
    }  # fmt: skip
    assert {name: case["outcome"] for name, case in outcomes["1"].items()} == {
        "test_a[wrong_model:build]": "failure", "test_b[wrong_model:build]": "skipped",
        "test_a[numpy]": "passed", "test_b[numpy]": "passed",
    }  # fmt: skip
    skipped = (
        ET.parse(tmp_path / "junit-1.xml").getroot().find(".//testcase[@name='test_b[wrong_model:build]']/skipped")
    )
    assert skipped is not None
    assert "model 'wrong_model:build' stopped after 1 failing test(s) (--model-maxfail 1)" in skipped.get("message", "")
