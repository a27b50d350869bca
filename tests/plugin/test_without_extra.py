"""Without the `transformers` extra: the built-in `transformers` model is left out of a run that names
no model, with the reason, and fails nothing; named, it is a usage error. Here the extra is hidden from
a subprocess (a sitecustomize that makes torch and transformers look absent); the slow test
tests/test_core_install.py runs a real install without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.plugin.project import run
from verifier.report import html, render
from verifier.report.results import Header, ModelCard, Report, Result

_HIDE_EXTRA = """
from verifier import extra

_installed = extra.installed
extra.installed = lambda module: module not in extra.MODULES and _installed(module)
"""
REASON = "this model needs torch and transformers (torch, transformers not installed here: "
REASON += "pip install 'lm-verifier[transformers]')"


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("hide-extra")
    (site / "sitecustomize.py").write_text(_HIDE_EXTRA)
    return site


def test_a_run_without_a_choice_leaves_it_out_with_the_reason(hidden: Path, tmp_path: Path) -> None:
    # One model-independent property (running models costs time): the selection, the header and the
    # report's header are checked here; tests/test_core_install.py (slow) runs `verifier check` on models.
    done = run(tmp_path, "-m", "pytest", "--pyargs", "verifier.properties", "-p", "verifier.report.collect",
               "--verifier-results=results.json", "-p", "no:cacheprovider", "-k", "test_presets_have_their_published",
               pythonpath=(hidden,), env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done
    assert "models under test: numpy (built-in), llama2c (built-in)" in done.stdout, done
    assert f"not tested here: transformers (built-in): {REASON}" in done.stdout  # pytest's header
    header = json.loads((tmp_path / "results.json").read_text())["header"]
    assert header["unavailable"] == {"transformers": REASON}
    assert [m["name"] for m in header["models"]] == ["numpy", "llama2c"]


def test_naming_it_is_a_usage_error_saying_how_to_install_it(hidden: Path, tmp_path: Path) -> None:
    done = run(tmp_path, "-m", "verifier", "check", "--model", "transformers", "--reports", "reports", "--",
               "-p", "no:cacheprovider", pythonpath=(hidden,))  # fmt: skip
    assert done.returncode == 2, done
    assert f"model 'transformers' (built-in) cannot run here: {REASON}" in done.stdout + done.stderr


def test_the_reports_name_a_left_out_model_and_give_it_no_verdict() -> None:
    header = Header([ModelCard("numpy", "built-in", {"gpt2": "logits"})], {}, "ci", {}, "suite", "now",
                    unavailable={"transformers": "it needs torch"})  # fmt: skip
    report = Report(header, [Result("test_a.py::test_x", "numpy", "pass", examples=3)])
    line = "transformers: not tested here (no verdict): it needs torch"
    assert [v.model for v in report.verdicts()] == ["numpy"] and report.verdict == "conforms"
    assert line in render.text(report) and f"- {line}" in render.markdown(report)
    assert f'<li class="left-out">{line}</li>' in html.html(report)
    assert Report.from_dict(json.loads(report.to_json())).header.unavailable == {"transformers": "it needs torch"}


def test_a_report_written_before_models_could_be_left_out_still_reads() -> None:
    data = json.loads(Report(Header([], {}, "ci", {}, "suite", "now")).to_json())
    del data["header"]["unavailable"]
    assert Report.from_dict(data).header.unavailable == {}
