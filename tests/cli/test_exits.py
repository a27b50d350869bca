"""Exits that say what happened (issue 45): a suite file that fails to load is a usage error naming the
file and the exception, not Ctrl-C; a model whose native code ends the process with an exit status
fails, the report naming it; a full reports file system is one line naming the path and the problem,
with nothing half-written. Each drives `verifier check` as a user would."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from verifier.cli import main
from verifier.report import collect, output, suite
from verifier.report.output import HTML, JSON, LOG, MARKDOWN
from verifier.report.results import Header, ModelCard, Report, Result

# One quick property of the installed suite, at the profile with the fewest examples.
_QUICK = ["--hypothesis-profile", "checkpoint", "--", "-k", "logits_agree", "-p", "no:cacheprovider"]
_PROPERTY = "test_agreement.py::test_logits_agree_with_the_oracle"


def _check(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`verifier check ARGS` in `cwd`, with `cwd` on the import path (where a user's model module is)."""
    environ = {**os.environ, "PYTHONPATH": str(cwd), **(env or {})}
    command = [sys.executable, "-m", "verifier", "check", *args]
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        pytest.param('raise RuntimeError("boom at import")\n', "RuntimeError: boom at import", id="raises"),
        pytest.param("def test_x(model_spec)\n    pass\n", "SyntaxError: expected ':'", id="syntax-error"),
    ],
)
def test_a_suite_file_that_fails_to_load_is_a_usage_error_not_ctrl_c(tmp_path: Path, source: str, cause: str) -> None:
    # pytest ends a session whose collection failed as it ends one stopped by Ctrl-C (exit status 2,
    # "Interrupted: 1 error during collection"): it was reported as "interrupted (Ctrl-C)", exit 130.
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_fine.py").write_text("def test_fine(model_spec):\n    pass\n")
    (tmp_path / "suite" / "test_broken.py").write_text(source)
    reports = tmp_path / "reports"
    done = _check(tmp_path, "--model", "numpy", "--suite", str(tmp_path / "suite"), "--reports", str(reports),
                  "--", "-p", "no:cacheprovider")  # fmt: skip
    broken = tmp_path / "suite" / "test_broken.py"
    assert (done.returncode, done.stderr) == (
        2,
        f"verifier check: error: a suite file failed to load: {broken}: {cause}; see {reports / LOG}\n",
    ), done
    assert [p.name for p in reports.iterdir()] == [LOG]  # pytest's output; no report of a suite that never ran


# A model whose native code ends the process (C exit() or _exit(): no Python code runs after it, no
# guard of the suite's can catch it), when it is built (`STEP` "build") or runs (`STEP` "logits").
_EXITING_MODEL = """
import ctypes

from verifier.plugin.adapters.reference import build as build_reference

STEP = {step!r}


class Exiting:
    def __init__(self, model):
        self.model = model

    def logits(self, tokens):
        ctypes.CDLL(None).{call}
        return self.model.logits(tokens)


def build(config, weights):
    if STEP == "build":
        ctypes.CDLL(None).{call}
    return Exiting(build_reference(config, weights))
"""
_MODEL = "exiting_model:build"


@pytest.mark.parametrize(
    ("step", "call", "status"),
    [
        pytest.param("logits", "exit(0)", 0, id="exit-0-in-a-test"),
        pytest.param("logits", "_exit(3)", 3, id="_exit-3-in-a-test"),
        pytest.param("build", "_exit(3)", 3, id="_exit-3-while-probed"),
    ],
)
def test_a_model_that_ends_the_process_fails_naming_the_exit_status(
    tmp_path: Path, step: str, call: str, status: int
) -> None:
    # Before: "pytest stopped before the suite ran (exit status 3)", exit 2 and no report; with exit(0), the
    # same with "exit status 0" (and plain pytest exits 0: a CI job passes).
    (tmp_path / "exiting_model.py").write_text(_EXITING_MODEL.format(step=step, call=call))
    reports = tmp_path / "reports"
    done = _check(tmp_path, "--model", _MODEL, "--reports", str(reports), *_QUICK)
    assert done.returncode == 1 and "pytest stopped before the suite ran" not in done.stderr, done
    assert sorted(p.name for p in reports.iterdir()) == sorted([MARKDOWN, JSON, HTML, LOG]), done
    report = json.loads((reports / JSON).read_text())
    failed = [r for r in report["results"] if r["outcome"] == "fail"]
    where = _PROPERTY if step == "logits" else collect.PROBE
    assert [(r["property"], r["model"]) for r in failed] == [(where, _MODEL)], report["results"]
    ended = f"ended the process (exit status {status}) while running {where} on {_MODEL}"
    assert ended in failed[0]["detail"], failed[0]["detail"]
    assert (report["stop"], report["verdict"]) == (f"exit status {status}", "fails")
    assert [(m["model"], m["verdict"]) for m in report["models"]] == [(_MODEL, "fails")]
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"stopped by exit status {status}: 1 fail")
    assert f"exit status {status}" in (reports / MARKDOWN).read_text()


def test_a_worker_that_ends_its_process_names_the_exit_status() -> None:
    # Under pytest-xdist (plain pytest with -n), the controller sees a worker that exited mid-test: its
    # test failed with xdist's "worker 'gw0' crashed", which did not say the process exited, nor how.
    config: Any = SimpleNamespace()
    collector = collect.Collector(config, None)
    collector.workers_down["gw0"] = 0
    result = Result(_PROPERTY, "m", "error")
    crash = f"worker 'gw0' crashed while running '{_PROPERTY}[m]'"  # pytest-xdist's own message
    report: Any = SimpleNamespace(node=SimpleNamespace(gateway=SimpleNamespace(id="gw0")), longrepr=crash)
    assert collector._worker_crash(report, result) == (
        f"crashed: the test ended pytest-xdist's worker gw0 (exit status 0) while running {_PROPERTY} on m"
    )


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB file system (tmpfs) at `tmp_path/fs`, to fill; a skip where none can be mounted."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if shutil.which("mount") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    """Write zeros to `path` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def test_a_full_reports_file_system_is_one_line_before_the_run(small_fs: Path) -> None:
    # Before: "pytest stopped before the suite ran (exit status 1)" and an empty pytest.log.
    _fill(small_fs / "filler")
    reports = small_fs / "reports"
    done = _check(small_fs.parent, "--model", "numpy", "--reports", str(reports), *_QUICK)
    assert (done.returncode, done.stderr) == (
        2,
        f"verifier check: error: no space left on device writing into {reports} before the run\n",
    ), done
    assert list(reports.iterdir()) == []


# Fills the reports' file system while the suite runs (as another job on the machine may).
_FILL = """
import os


def fill():
    fd = os.open(os.environ["FILLER"], os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        pass
    finally:
        os.close(fd)
"""
# ... in a test, the journal of the tests after it failing (it grows past the last block it was given) ...
_FILLING_TEST = """
import pytest


def test_fills_the_disk(model_spec):
    fill()


@pytest.mark.parametrize("i", range(20))
def test_after(model_spec, i):
    pass
"""
# ... or at the session's end (a plugin's sessionfinish): pytest's summary, and the results after it.
_FILLING_SUMMARY = """

def pytest_sessionfinish(session):
    fill()
    session.config.get_terminal_writer().write("a summary larger than what is left\\n" * 500, flush=True)
"""


@pytest.mark.parametrize("when", ["in-a-test", "in-the-summary"])
def test_a_reports_file_system_that_fills_during_the_run_is_one_line(small_fs: Path, when: str) -> None:
    # Before: "pytest stopped before the suite ran (exit status 1)", and the collector's traceback in a
    # pytest.log cut short by the full file system.
    suite_dir = small_fs.parent / "suite"
    suite_dir.mkdir()
    (suite_dir / "test_suite.py").write_text(_FILL + (_FILLING_TEST if when == "in-a-test" else _TEST))
    if when == "in-the-summary":
        (suite_dir / "conftest.py").write_text(_FILL + _FILLING_SUMMARY)
    reports = small_fs / "reports"
    done = _check(small_fs.parent, "--model", "numpy", "--suite", str(suite_dir), "--reports", str(reports),
                  "--", "-p", "no:cacheprovider", env={"FILLER": str(small_fs / "filler")})  # fmt: skip
    assert (done.returncode, done.stderr) == (
        2,
        f"verifier check: error: no space left on device writing pytest's results into {reports}\n",
    ), done
    assert {p.name for p in reports.iterdir()} <= {LOG}  # no report, nothing half-written, no staging folder


_TEST = """

def test_runs(model_spec):
    pass
"""


def _pytest_that_passes(command: list[str], log: Path | None = None, hang_dir: Path | None = None) -> int:
    """`suite.run` played: the results collector's report of a passing run, and pytest's log."""
    results = Path(next(a for a in command if a.startswith("--verifier-results=")).partition("=")[2])
    header = Header([ModelCard("numpy", "built-in", {"gpt2": "logits"})], {}, "ci", {}, "suite", "now")
    results.write_text(Report(header, [Result(_PROPERTY, "numpy", "pass", examples=3)]).to_json())
    if log is not None:
        log.write_text("pytest's whole output\n")
    return 0


def test_no_space_for_a_report_names_the_report_and_publishes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the staging folder's path ("reports/.verifier-run-x/conformance.json: cannot write the report"),
    # and pytest's log, whole, removed with the staging folder.
    real = output.atomic_write

    def full(path: Any) -> Any:
        if Path(path).name == JSON:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path)

    monkeypatch.setattr(suite, "run", _pytest_that_passes)
    monkeypatch.setattr(output, "atomic_write", full)
    reports = tmp_path / "reports"
    assert main(["check", "--model", "numpy", "--reports", str(reports)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"verifier check: error: no space left on device writing {reports / JSON}\n"
    assert [p.name for p in reports.iterdir()] == [LOG]  # no report but whole ones; pytest's output kept
