"""Stops that leave the truth (issue 25): an empty --checkpoint is refused, SIGTERM stops `verifier check`
as Ctrl-C does and says so, SIGKILL leaves no pytest running, a model's crash is its verdict, and one run
at a time writes into a reports folder, the previous run's files removed and its own appearing together."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fixtures.plugin import _fixed_checkpoint
from verifier.cli import main
from verifier.plugin import checkpoint
from verifier.report import collect
from verifier.report.output import HTML, JSON, LOG, MARKDOWN, ReportError, only_run, publish, write_reports
from verifier.report.results import Header, ModelCard, Report, Result


def test_an_empty_checkpoint_is_refused_by_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--checkpoint "$CKPT"` with CKPT unset in CI: before, it ran and conformed on drawn configs.
    assert main(["check", "--model", "numpy", "--checkpoint", "", "--reports", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint '': an empty value names no checkpoint" in err and len(err.splitlines()) == 1, err


def _config(checkpoint_option: str | None) -> Any:
    return SimpleNamespace(getoption=lambda name: checkpoint_option)


def test_an_empty_checkpoint_is_refused_by_the_pytest_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(checkpoint.ENV_VAR, raising=False)
    with pytest.raises(pytest.UsageError, match="--checkpoint '': an empty value names no checkpoint"):
        _fixed_checkpoint(_config(""))


def test_an_empty_checkpoint_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(checkpoint.ENV_VAR, "")  # what CI systems that cannot unset a variable do
    assert _fixed_checkpoint(_config(None)) is None


def test_a_second_run_into_the_same_reports_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    with only_run(reports):  # the first run, still writing
        assert main(["check", "--model", "numpy", "--reports", str(reports)]) == 2
    err = capsys.readouterr().err
    assert f"{reports}: another verifier check is writing its reports here" in err and len(err.splitlines()) == 1


def test_a_run_removes_the_previous_runs_reports_as_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / MARKDOWN).write_text("numpy: conforms\n")  # the previous run's
    # A run that stops before it writes reports (pytest cannot start) leaves no old "conforms" beside its log.
    assert main(["check", "--model", "no-such-model", "--reports", str(reports), "--", "-p", "no:cacheprovider"]) == 2
    assert "pytest stopped before the suite ran" in capsys.readouterr().err
    assert not (reports / MARKDOWN).exists()


_SLOW_SUITE = """
import os, pathlib, time


def test_waits(model_spec):
    pathlib.Path(os.environ["STARTED"]).write_text("started")
    time.sleep(30)
"""


def test_sigterm_stops_check_as_ctrl_c_does(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_suite.py").write_text(_SLOW_SUITE)
    (tmp_path / "tmp").mkdir()  # check's temporary folder goes here: it must be gone after
    started = tmp_path / "started"
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "STARTED": str(started)}
    check = subprocess.Popen(
        [sys.executable, "-m", "verifier", "check", "--model", "numpy", "--suite", str(tmp_path / "suite"),
         "--reports", str(tmp_path / "reports"), "--", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(1200):
            if started.exists():
                break
            time.sleep(0.05)
        os.kill(check.pid, signal.SIGTERM)  # what a CI timeout or cancellation sends
        _, stderr = check.communicate(timeout=120)
    finally:
        check.kill()
    assert (check.returncode, stderr) == (130, "verifier check: interrupted (SIGTERM)\n"), stderr
    report = json.loads((tmp_path / "reports" / "conformance.json").read_text())
    results = [(r["property"], r["outcome"], r["detail"]) for r in report["results"]]
    assert results == [("test_suite.py::test_waits", "skip", "the run was interrupted (SIGTERM) while this test ran")]
    assert report["verdict"] == "untested" and report["stop"] == "SIGTERM"
    assert list((tmp_path / "tmp").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == sorted([MARKDOWN, JSON, HTML, LOG])


def _check(tmp_path: Path, suite: str, *options: str) -> list[str]:
    """The command line of `verifier check` on `suite` (a test file's text) with the numpy model."""
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_suite.py").write_text(suite)
    suite_and_reports = ["--suite", str(tmp_path / "suite"), "--reports", str(tmp_path / "reports")]
    return [sys.executable, "-m", "verifier", "check", "--model", "numpy", *options, *suite_and_reports,
            "--", "-p", "no:cacheprovider"]  # fmt: skip


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return not stat.parent.parent.is_dir()  # no /proc here: os.kill said it exists
    except IndexError:
        return True


# A test that records the processes of the run, pytest (or its xdist worker and controller) and a
# process the model started, and waits.
_PROCESSES_SUITE = """
import os, pathlib, subprocess, sys, time


def test_waits(model_spec):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pids = [os.getpid(), child.pid] + ([os.getppid()] if os.environ.get("PYTEST_XDIST_WORKER") else [])
    started = pathlib.Path(os.environ["STARTED"])
    started.with_suffix(".tmp").write_text(" ".join(map(str, pids)))
    started.with_suffix(".tmp").replace(started)  # whole when it appears
    time.sleep(600)  # longer than the test's deadline: only a kill ends it in time
"""


@pytest.mark.parametrize(
    "parallel", [pytest.param([], id="plain"), pytest.param(["-n", "1"], id="xdist", marks=pytest.mark.slow)]
)
def test_sigkill_of_check_takes_pytest_and_its_processes_down(tmp_path: Path, parallel: list[str]) -> None:
    # SIGKILL is what a CI runner sends after a timeout: no handler runs in `verifier check`.
    (tmp_path / "tmp").mkdir()
    started = tmp_path / "started"
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "STARTED": str(started)}
    command = [*_check(tmp_path, _PROCESSES_SUITE), *parallel]
    check = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        _wait(started.exists, "the test never started")
        pids = [int(pid) for pid in started.read_text().split()]
        check.kill()
        check.wait(timeout=60)
        _wait(lambda: not any(_alive(pid) for pid in pids), "pytest or a process of the run outlived verifier check")
    finally:
        check.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # No temporary folder of verifier's left where no run would find it (pytest's own pytest-of-* is its to prune):
    # the run's private $TMPDIR is removed by the watchdog's child once the run's processes are gone.
    _wait(
        lambda: not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("verifier")],
        f"a temporary folder of the killed run was left: {sorted(p.name for p in (tmp_path / 'tmp').iterdir())}",
    )
    # The killed run's staging folder (its pytest.log) stays in the reports folder until the next run.
    (stale,) = (tmp_path / "reports").iterdir()
    assert stale.name.startswith(".verifier-run-") and (stale / LOG).exists()
    with only_run(tmp_path / "reports") as staging:  # the killed run's lock went with it; the next run clears up
        assert list((tmp_path / "reports").iterdir()) == [staging]


def _wait(condition: Callable[[], bool], failure: str) -> None:
    for _ in range(1200):  # a generous deadline on a loaded machine, not a measure of speed
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(failure)


def test_a_run_starts_by_removing_what_a_killed_run_left(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    stale = reports / ".verifier-run-killed"
    stale.mkdir(parents=True)
    (stale / LOG).write_text("the killed run's output")
    plots = ("stage-errors_numpy_test_x.svg", "stage-errors_numpy_test_x.png")  # and an earlier version's PNG
    old = [reports / name for name in (MARKDOWN, JSON, HTML, LOG, *plots)]
    for path in old:
        path.write_text("the previous run's")
    (reports / "junit.xml").write_text("not verifier's")
    with only_run(reports) as staging:
        assert sorted(p.name for p in reports.iterdir()) == sorted(["junit.xml", staging.name])
        assert staging.parent == reports and staging.name.startswith(".verifier-run-")
    assert [p.name for p in reports.iterdir()] == ["junit.xml"]  # no lock file, no staging folder


def test_a_second_run_is_refused_while_the_first_holds_the_folder(tmp_path: Path) -> None:
    with only_run(tmp_path) as staging:
        with pytest.raises(ReportError, match="another verifier check is writing its reports here"), only_run(tmp_path):
            pass
        assert staging.is_dir()  # the refused run removed nothing of the first's
    with only_run(tmp_path):  # released at the end
        pass


def test_the_reports_appear_together_from_the_staging_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    with only_run(reports) as staging:
        (staging / LOG).write_text("pytest's output")
        written = write_reports(_report(), staging)
        assert [p.name for p in reports.iterdir()] == [staging.name]  # nothing in place before they are all written
        published = publish([*written, staging / LOG], reports)
    assert published == [reports / MARKDOWN, reports / JSON, reports / HTML, reports / LOG]
    assert sorted(p.name for p in reports.iterdir()) == sorted(p.name for p in published)


def _report() -> Report:
    header = Header([ModelCard("m", "test", {"gpt2": "logits"})], {}, "ci", {}, "suite", "now")
    return Report(header, [Result("test_a.py::test_x", "m", "pass", examples=3)])


# A native engine that segfaults or aborts takes the process running it down; the test plays it.
_CRASH_SUITE = """
import faulthandler, os


def test_passes(model_spec):
    assert callable(model_spec.factory)


def test_runs_the_model(model_spec):
    if model_spec.name != "numpy":
        {crash}


def test_last(model_spec):
    pass
"""
_OTHER = "verifier.plugin.adapters.reference:build"  # a second model (the same factory under its spec's name)


@pytest.mark.parametrize(
    ("crash", "signame", "parallel"),
    [
        pytest.param("os.abort()", "SIGABRT", [], id="abort"),
        pytest.param("faulthandler._sigsegv()", "SIGSEGV", [], id="segfault"),
        pytest.param("os.abort()", "SIGABRT", ["-n", "2"], id="xdist-abort", marks=pytest.mark.slow),
    ],
)
def test_a_crash_of_the_models_process_is_its_verdict(
    tmp_path: Path, crash: str, signame: str, parallel: list[str]
) -> None:
    command = [*_check(tmp_path, _CRASH_SUITE.format(crash=crash), "--model", _OTHER), *parallel]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done
    reports = tmp_path / "reports"
    assert sorted(p.name for p in reports.iterdir()) == sorted([MARKDOWN, JSON, HTML, LOG]), done
    report = json.loads((reports / JSON).read_text())
    outcomes = {(r["property"], r["model"]): r["outcome"] for r in report["results"]}
    crashed = [r for r in report["results"] if r["outcome"] == "fail"]
    assert [(r["property"], r["model"]) for r in crashed] == [("test_suite.py::test_runs_the_model", _OTHER)]
    assert signame in crashed[0]["detail"] and "test_suite.py::test_runs_the_model" in crashed[0]["detail"]
    assert _OTHER in crashed[0]["detail"], crashed[0]["detail"]
    assert signame in (reports / MARKDOWN).read_text() and signame in (reports / HTML).read_text()
    verdicts = {m["model"]: m["verdict"] for m in report["models"]}
    assert outcomes[("test_suite.py::test_passes", "numpy")] == "pass"  # the other model's results stay
    assert report["verdict"] == "fails" and done.stdout.rstrip().splitlines()[-1].startswith(
        f"stopped by {signame}: " if not parallel else "1 fail, "
    )
    if parallel:  # xdist replaces the crashed worker: the run goes on to its end
        assert outcomes[("test_suite.py::test_last", _OTHER)] == "pass"
        assert verdicts == {"numpy": "conforms", _OTHER: "fails"}
    else:  # pytest died: what did not run is not run, and no model conforms on part of a run
        assert ("test_suite.py::test_last", _OTHER) not in outcomes
        assert verdicts == {"numpy": "untested", _OTHER: "fails"}
    assert "pytest stopped before the suite ran" not in done.stderr


def test_the_journal_of_a_run_that_died_gives_its_report(tmp_path: Path) -> None:
    results = tmp_path / "results.json"  # never written: pytest died
    header = dataclasses.asdict(_report().header)
    passed = dataclasses.asdict(Result("test_a.py::test_x", "m", "pass", nodeid="test_a.py::test_x[m]"))
    running = dataclasses.asdict(Result("test_a.py::test_y", "m", "error", nodeid="test_a.py::test_y[m]"))
    records = [{"header": header}, {"start": passed["nodeid"]}, {"result": passed, "done": True}]
    records += [{"start": running["nodeid"]}, {"result": running, "done": False}]
    lines = [json.dumps(record) for record in records]
    collect.journal_path(results).write_text("\n".join(lines) + '\n{"result": {"nodeid": "cut sh')  # died mid-line
    report = collect.recover(results, -signal.SIGSEGV)
    assert report is not None and (report.stop, report.stopped, report.verdict) == (
        "SIGSEGV",
        "stopped by SIGSEGV",
        "fails",
    )
    assert [(r.property, r.outcome) for r in report.results] == [
        ("test_a.py::test_x", "pass"),
        ("test_a.py::test_y", "fail"),
    ]
    assert report.results[1].detail.startswith("crashed: pytest died of SIGSEGV (Segmentation fault) while running "
                                               "test_a.py::test_y on m")  # fmt: skip
    collect.journal_path(results).write_text(lines[0][:10])  # died before its session started
    assert collect.recover(results, -signal.SIGSEGV) is None


@pytest.mark.parametrize("option", ["--reports", "--suite", "--pytest-config", "--llama2c-src"])
def test_an_explicitly_empty_path_is_refused(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--reports "$DIR"` with DIR unset: before, the run wrote (and first removed) reports in the current
    # directory, or ignored the option and ran with the default, and conformed without a word.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(["check", "--model", "numpy", option, ""])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: an empty value names nothing" in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written or removed


def test_a_model_that_crashes_while_it_is_probed_fails(tmp_path: Path) -> None:
    # The header builds each model on tiny configs before any test: a crash there was "pytest stopped
    # before the suite ran (exit status -6)", exit 2, no verdict and no report.
    (tmp_path / "crashing_model.py").write_text("import os\n\n\ndef build(config, weights):\n    os.abort()\n")
    command = _check(tmp_path, _CRASH_SUITE.format(crash="pass"), "--model", "crashing_model:build")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done
    report = json.loads((tmp_path / "reports" / JSON).read_text())
    failed = [r for r in report["results"] if r["outcome"] == "fail"]
    assert [r["model"] for r in failed] == ["crashing_model:build"], report["results"]
    assert "SIGABRT" in failed[0]["detail"] and "probe configs" in failed[0]["detail"], failed[0]["detail"]
    assert {m["model"]: m["verdict"] for m in report["models"]} == {
        "numpy": "untested",
        "crashing_model:build": "fails",
    }
    assert "pytest stopped before the suite ran" not in done.stderr
