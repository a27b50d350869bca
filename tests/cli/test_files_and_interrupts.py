"""A newcomer's odd inputs (a device, an empty name, a JSON file not named config.json, unreadable files,
reports where a file is) and interrupted runs: each is one line and an exit status, never a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifier.cli import main, trace_cmd
from verifier.formats import save_checkpoint
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.report import suite
from verifier.report.output import write_reports
from verifier.report.results import Header, ModelCard, Report, Result

TINY = preset("gpt2").replace(n_layers=1, d_model=8, n_heads=2, n_kv_heads=2, d_ff=16, vocab_size=50257, n_ctx=16)
READS_A_MODEL = ["inspect", "params", "trace"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny")
    save_checkpoint(directory, TINY, init_weights(TINY))
    return directory


@pytest.mark.parametrize("command", READS_A_MODEL)
def test_a_device_is_not_a_regular_file(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "/dev/null"]) == 2
    assert "/dev/null: path: not a regular file or directory (a device, pipe or socket)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["inspect", "trace"])
def test_an_empty_name_names_nothing(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Path("") is the current directory: an unset variable in a script must not read it.
    assert main([command, ""]) == 2
    assert "'': an empty name names no file, directory or repo id" in capsys.readouterr().err


def test_empty_text_gives_no_tokens_to_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "gpt2", "--text", ""]) == 2  # llama2.c's tokenizer gives BOS: that traces
    assert "--text '' gives no tokens to trace: give some text, or ids with --tokens" in capsys.readouterr().err


def test_a_json_file_not_named_config_json_is_read_as_a_config_but_is_no_model(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "settings.json"
    shutil.copy(tiny / "config.json", settings)
    assert main(["params", str(settings)]) == 0
    assert main(["trace", str(settings), "--tokens", "1,2"]) == 0  # its own config, seeded weights
    capsys.readouterr()
    assert main(["inspect", str(settings)]) == 2  # weights are read from a model directory
    assert "settings.json: file: a model's weights are read from the directory of its config.json" in (
        capsys.readouterr().err
    )
    (tmp_path / "broken.json").write_text('{"model_type": "gpt2"')
    assert main(["trace", str(tmp_path / "broken.json")]) == 2
    assert "broken.json: config.json: not valid JSON" in capsys.readouterr().err  # not "config.json: file not found"


def _as_a_user(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m verifier ARGV` where file permissions apply: root reads anything, so as root it runs
    without the capabilities that bypass them (capsh); as another user, as it is."""
    command = [sys.executable, "-m", "verifier", *argv]
    if os.geteuid() == 0:
        capsh = shutil.which("capsh")
        if capsh is None:
            pytest.skip("running as root without capsh: file permissions cannot apply")
        command = [capsh, "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", subprocess.list2cmdline(command)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", READS_A_MODEL)
def test_unreadable_files_and_directories_are_one_line_errors(tiny: Path, tmp_path: Path, command: str) -> None:
    (tmp_path / "model.bin").write_bytes(b"\0" * 64)
    shutil.copytree(tiny, tmp_path / "locked")
    shutil.copytree(tiny, tmp_path / "secret-config")
    (tmp_path / "model.bin").chmod(0)
    (tmp_path / "secret-config" / "config.json").chmod(0)
    (tmp_path / "locked").chmod(0)
    try:
        for name in ("model.bin", "locked", "secret-config"):
            done = _as_a_user([command, name], tmp_path)
            assert done.returncode == 2 and "Traceback" not in done.stderr, (name, done.stderr)
            assert done.stderr.startswith(f"verifier {command}: error: ") and "ermission denied" in done.stderr
    finally:
        (tmp_path / "locked").chmod(0o755)


def test_reports_that_cannot_be_listed_are_a_usage_error_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir(mode=0o300)  # writable, not readable: no lock on it, no listing of old reports
    try:
        done = _as_a_user(["check", "--reports", "reports"], tmp_path)
    finally:
        (tmp_path / "reports").chmod(0o755)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("verifier check: error: reports: cannot lock the reports directory: Permission")


def test_reports_where_a_file_is_are_a_usage_error_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(command: object) -> int:
        raise AssertionError("the suite ran although its reports could not be written")

    monkeypatch.setattr(suite, "run", run)
    (tmp_path / "taken").write_text("a file")
    assert main(["check", "--reports", str(tmp_path / "taken")]) == 2
    assert f"{tmp_path / 'taken'}: cannot be the reports directory: File exists" in capsys.readouterr().err


def _report(exit_status: int = 0) -> Report:
    header = Header([ModelCard("m", "test", {"gpt2": "logits"})], {}, "ci", {}, "suite", "now")
    return Report(header, [Result("test_a.py::test_x", "m", "pass", examples=3)], exit_status)


def test_report_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        written = write_reports(_report(), tmp_path / "reports")
    finally:
        os.umask(old)
    assert [oct(p.stat().st_mode & 0o777) for p in written] == ["0o644"] * 3


def test_an_interrupted_run_conforms_in_nothing() -> None:
    assert _report().verdict == "conforms" and [v.verdict for v in _report().verdicts()] == ["conforms"]
    interrupted = _report(exit_status=2)  # pytest's exit status for Ctrl-C
    assert interrupted.verdict == "untested" and not interrupted.conforms
    (verdict,) = interrupted.verdicts()
    assert (verdict.verdict, verdict.reason) == (
        "untested",
        "the run was interrupted (Ctrl-C) before every property ran on it",
    )


def test_ctrl_c_in_a_command_is_interrupted_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(trace_cmd, "run", run)
    assert main(["trace", "gpt2"]) == 130
    assert capsys.readouterr().err == "verifier trace: interrupted\n"


# pytest's part, played by a child that writes each interrupt it gets into a file; it exits 2 after
# the first, after `sys.argv[2]` seconds (a run that takes long to stop).
_PYTEST = """
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
out.write_text("started")
try:
    time.sleep(60)
except KeyboardInterrupt:
    out.write_text("interrupted once")
    try:
        time.sleep(float(sys.argv[2]))
    except KeyboardInterrupt:
        out.write_text("interrupted twice")
    sys.exit(2)
"""
_CHECK = "import sys; from verifier.report import suite; print(suite.run([sys.executable, '-c', *sys.argv[1:]]))"


def _wait_for(path: Path, text: str) -> None:
    for _ in range(1200):
        if path.exists() and path.read_text() == text:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never said {text!r}")


def _check_running_pytest(out: Path, stopping_s: float) -> subprocess.Popen[str]:
    """`suite.run` (what `verifier check` runs pytest with) in its own session, as a terminal's job."""
    command = [sys.executable, "-c", _CHECK, _PYTEST, str(out), str(stopping_s)]
    check = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(out, "started")
    return check


def test_ctrl_c_during_check_reaches_pytest_once_and_check_waits_for_its_results(tmp_path: Path) -> None:
    check = _check_running_pytest(tmp_path / "pytest-saw", stopping_s=0.5)
    try:
        os.killpg(check.pid, signal.SIGINT)  # what Ctrl-C does: the terminal's foreground process group
        stdout, _ = check.communicate(timeout=120)
    finally:
        check.kill()
    assert (tmp_path / "pytest-saw").read_text() == "interrupted once"
    assert (stdout.strip(), check.returncode) == ("2", 0)  # pytest's status came back; nothing was killed


def test_a_second_ctrl_c_kills_pytest(tmp_path: Path) -> None:
    check = _check_running_pytest(tmp_path / "pytest-saw", stopping_s=60)
    try:
        os.killpg(check.pid, signal.SIGINT)
        _wait_for(tmp_path / "pytest-saw", "interrupted once")
        os.killpg(check.pid, signal.SIGINT)
        _, stderr = check.communicate(timeout=120)
    finally:
        check.kill()
    assert (tmp_path / "pytest-saw").read_text() == "interrupted once"  # killed while it stopped: no second
    assert check.returncode != 0 and stderr.rstrip().endswith("KeyboardInterrupt"), stderr


def test_sigterm_that_kills_pytest_before_it_can_stop_is_an_interrupt(tmp_path: Path) -> None:
    # pytest turns SIGTERM into Ctrl-C once the results collector is configured; before, SIGTERM kills it.
    check = _check_running_pytest(tmp_path / "pytest-saw", stopping_s=60)  # the child has no SIGTERM handler
    try:
        os.kill(check.pid, signal.SIGTERM)
        stdout, stderr = check.communicate(timeout=120)
    finally:
        check.kill()
    assert (tmp_path / "pytest-saw").read_text() == "started"
    assert stdout == "" and stderr.rstrip().endswith("KeyboardInterrupt"), (stdout, stderr)  # not a status


_INTERRUPTED_SUITE = """
def test_passes(model_spec):
    assert callable(model_spec.factory)


def test_interrupted_here(model_spec):
    raise KeyboardInterrupt  # what Ctrl-C raises in the test that runs


def test_never_reached(model_spec):
    pass
"""


def _check_suite(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`verifier check --model numpy` on a suite of `files` (name -> text) in tmp_path/suite, reports beside it."""
    (tmp_path / "suite").mkdir()
    for name, text in files.items():
        (tmp_path / "suite" / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "verifier", "check", "--model", "numpy", "--suite", str(tmp_path / "suite"),
         "--reports", str(tmp_path / "reports"), "--", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_an_interrupted_check_reports_what_ran_and_conforms_in_nothing(tmp_path: Path) -> None:
    done = _check_suite(tmp_path, {"test_suite.py": _INTERRUPTED_SUITE})
    assert (done.returncode, done.stderr) == (130, "verifier check: interrupted (Ctrl-C)\n"), done
    report = json.loads((tmp_path / "reports" / "conformance.json").read_text())
    outcomes = {r["property"]: (r["outcome"], r["detail"]) for r in report["results"]}
    assert outcomes == {
        "test_suite.py::test_passes": ("pass", ""),
        "test_suite.py::test_interrupted_here": ("skip", "the run was interrupted (Ctrl-C) while this test ran"),
    }
    assert report["verdict"] == "untested" and report["models"][0]["verdict"] == "untested"
    assert done.stdout.rstrip().splitlines()[-1].startswith("interrupted (Ctrl-C): 1 pass, 1 skip: untested: not")


# A property whose every example but the simplest fails, and whose process is stopped (`stop`) while
# Hypothesis shrinks its first failure; the suite's own hooks (its conftest) wrap it as they wrap every property.
_SUITE_HOOKS = "from verifier.properties.conftest import *  # noqa: F403\n"
_SHRINKING_SUITE = """
import os

from hypothesis import given, strategies as st

FAILED = []


@given(st.integers(0, 1000))
def test_shrinking(model_spec, n):
    if FAILED:  # the first failure is being shrunk (the simplest example, 0, passes: it is not the first)
        {stop}
    if n > 0:
        FAILED.append(n)
    assert n == 0, f"every example but 0 fails, this one with n={{n}}"
"""


@pytest.mark.parametrize(
    ("stop", "status", "detail"),
    [
        pytest.param(
            "raise KeyboardInterrupt",  # what Ctrl-C raises in the code that runs
            130,
            "every example but 0 fails, this one with n=%d (its first failing example, as found: the run was "
            "interrupted (Ctrl-C) while Hypothesis shrank it)",
            id="ctrl-c",
        ),
        pytest.param(
            "os._exit(3)",  # a model's native code ending the process: the report comes from the journal
            1,
            "crashed: the test ended the process (exit status 3) while running test_suite.py::test_shrinking on "
            "numpy; the tests "
            "after it did not run; it had failed before: every example but 0 fails, this one with n=%d",
            id="exit",
            marks=pytest.mark.slow,  # 3 s: the journal's path; the default run keeps Ctrl-C's
        ),
    ],
)
def test_a_run_stopped_while_a_failure_is_shrunk_reports_the_failure_as_found(
    tmp_path: Path, stop: str, status: int, detail: str
) -> None:
    done = _check_suite(tmp_path, {"test_suite.py": _SHRINKING_SUITE.format(stop=stop), "conftest.py": _SUITE_HOOKS})
    assert done.returncode == status, done
    # Said on the terminal as found, before the test ended (its progress character comes after).
    first = re.search(r"first failure of numpy, [\d.]+ s into test_shrinking: every example but 0 fails, this one "
                      r"with n=(\d+) \(Hypothesis shrinks it for up to 300 s; an early verdict: verifier check "
                      r"--first-failure\)", done.stdout)  # fmt: skip
    assert first is not None, done.stdout
    report = json.loads((tmp_path / "reports" / "conformance.json").read_text())
    (result,) = [r for r in report["results"] if r["property"] == "test_suite.py::test_shrinking"]
    assert (result["outcome"], result["detail"]) == ("fail", detail % int(first.group(1))), result
    assert report["models"][0]["verdict"] == "fails"  # a failure found is a failure, shrunk or not


@pytest.mark.slow  # 3 s: a pytest of its own
def test_plain_pytest_says_the_first_failure_before_the_test_ends(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_suite.py").write_text(_SHRINKING_SUITE.format(stop="pass"))
    (tmp_path / "suite" / "conftest.py").write_text(_SUITE_HOOKS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "suite", "--model", "numpy", "-p", "no:cacheprovider",
         "--shrink-seconds", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("first failure of numpy, "))
    assert (
        "(Hypothesis shrinks it for up to 1 s; an early verdict: --model-maxfail 1 --shrink-seconds 5)" in (lines[said])
    )
    assert lines[said - 1] == "suite/test_suite.py " and lines[said + 1].startswith("F"), lines  # then its `F`
