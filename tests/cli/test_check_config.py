"""`verifier check` runs the suite with its own pytest configuration: a user's pytest.ini, pyproject.toml or
$PYTEST_ADDOPTS around the suite (an installed suite sits under the user's project when the venv does) does
not leak into it; `--pytest-config PATH` asks for the user's. And a parallel run (`-- -n auto`) works from the
core install, or says what to install."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.report import suite

# A test of the model that meets a library's deprecation warning, as the built-in `transformers` does.
_WARNING_SUITE = """
import warnings


def test_a_library_warns(model_spec):
    warnings.warn("a library deprecates an argument", DeprecationWarning)
"""


def _project(root: Path) -> Path:
    """`root/project` with the suite under it, where a venv inside the project puts the installed one."""
    project = root / "project"
    (project / "suite").mkdir(parents=True)
    (project / "suite" / "test_suite.py").write_text(_WARNING_SUITE)
    return project


def _check(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("VERIFIER_", "PYTEST_"))}
    command = [sys.executable, "-m", "verifier", "check", "--model", "numpy", "--suite", "suite", *args]
    return subprocess.run(command, cwd=project, env=environ | (env or {}), capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # two `verifier check` runs: 3 s here
def test_the_users_filterwarnings_error_does_not_fail_the_model(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    done = _check(project)
    assert done.returncode == 0, done
    assert "numpy: conforms (1 property run: 1 pass, 0 fail" in done.stdout, done.stdout
    # Asked for, it applies: the warning is an error, and the model fails.
    asked = _check(project, "--pytest-config", "pyproject.toml")
    assert asked.returncode == 1, asked
    assert "DeprecationWarning: a library deprecates an argument" in asked.stdout, asked.stdout


@pytest.mark.slow  # two `verifier check` runs: 3 s here
def test_a_stray_addopts_in_a_parent_directory_or_pytest_addopts_is_not_a_usage_error(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    done = _check(project)
    assert done.returncode == 0 and "numpy: conforms (" in done.stdout, done
    from_env = _check(project, env={"PYTEST_ADDOPTS": "--no-such-option"})
    assert from_env.returncode == 0 and "numpy: conforms (" in from_env.stdout, from_env


def test_the_suite_s_own_configuration_ships_with_the_package() -> None:
    command = suite.pytest_arguments(Path("/s"), Path("/r.json"))
    assert command[command.index("-c") + 1] == str(suite.OWN_CONFIG) and suite.OWN_CONFIG.is_file()
    assert "--rootdir=/s" in command and "--confcutdir=/s" in command
    assert suite.OWN_CONFIG.read_text().rstrip().endswith("[pytest]")  # pytest's defaults, nothing of ours added


@pytest.mark.parametrize("off", [("-p", "no:cacheprovider"), ("-pno:cacheprovider",)])
def test_a_run_with_pytest_s_cache_off_is_not_given_a_cache_directory(off: tuple[str, ...]) -> None:
    # pytest warned "Unknown config option: cache_dir" in every such run's log.
    command = suite.pytest_arguments(Path("/s"), Path("/r.json"), pytest_args=off)
    assert not any(arg.startswith("cache_dir=") for arg in command), command
    assert any(arg.startswith("cache_dir=") for arg in suite.pytest_arguments(Path("/s"), Path("/r.json")))


def test_a_missing_pytest_config_is_a_one_line_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(suite, "run", _must_not_run)
    assert main(["check", "--pytest-config", str(tmp_path / "nope.ini"), "--reports", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        f"verifier check: error: --pytest-config {tmp_path / 'nope.ini'}: no such file "
        "(give a pytest.ini, pyproject.toml, tox.ini or setup.cfg)\n"
    )


def _must_not_run(command: object, log: object = None) -> int:
    raise AssertionError("the suite ran although its options were wrong")


@pytest.mark.parametrize("option", [["-n", "auto"], ["-n4"], ["--numprocesses=2"], ["--dist", "load"]])
def test_a_parallel_run_without_pytest_xdist_says_what_to_install(
    option: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xdist" else find_spec(name, *a))
    monkeypatch.setattr(suite, "run", _must_not_run)
    assert main(["check", "--reports", str(tmp_path / "r"), "--", *option]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("which is not installed here: pip install pytest-xdist\n"), err
    assert err.startswith(f"verifier check: error: {option[0]} runs the suite in parallel with pytest-xdist"), err


@pytest.mark.parametrize(("pytest_args", "logged"), [([], True), (["--pdb"], False), (["-k", "x", "--trace"], False)])
def test_pytest_s_output_goes_to_the_log_unless_it_must_talk_to_the_terminal(
    pytest_args: list[str],
    logged: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    given: list[Path | None] = []

    def run(command: object, log: Path | None = None, hang_dir: Path | None = None) -> int:
        given.append(log)
        if log is not None:
            log.write_text("ERROR: usage: pytest's own words\n")
        return 4  # pytest's usage error: no results

    monkeypatch.setattr(suite, "run", run)
    assert main(["check", "--reports", str(tmp_path), "--", *pytest_args]) == 2
    # pytest writes its log in the run's staging folder, and the log is put in place when it ends.
    assert [log and (log.parent.parent, log.name) for log in given] == [(tmp_path, "pytest.log") if logged else None]
    err = capsys.readouterr().err
    where = f"see {tmp_path / 'pytest.log'}" if logged else "see above"
    assert err.endswith(f"pytest stopped before the suite ran (a usage error); {where}\n"), err
    assert ("ERROR: usage: pytest's own words\n" in err) == logged  # the log's last lines, on stderr
