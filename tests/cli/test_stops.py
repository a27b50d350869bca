"""Stops that leave the truth (issue 25): an empty --checkpoint is refused, SIGTERM stops `verifier check`
as Ctrl-C does, and one run at a time writes into a reports folder, the previous run's reports removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import filelock
import pytest

from fixtures.plugin import _fixed_checkpoint
from verifier.cli import main
from verifier.plugin import checkpoint
from verifier.report.output import LOCK, MARKDOWN


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
    with filelock.FileLock(reports / LOCK, timeout=0):  # the first run, still writing
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
    assert (check.returncode, stderr) == (130, "verifier check: interrupted\n"), stderr
    report = json.loads((tmp_path / "reports" / "conformance.json").read_text())
    assert [(r["property"], r["outcome"]) for r in report["results"]] == [("test_suite.py::test_waits", "skip")]
    assert report["verdict"] == "untested"
    assert list((tmp_path / "tmp").iterdir()) == []
