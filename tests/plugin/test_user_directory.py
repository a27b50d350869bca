"""Run from a model's own directory, as its author does: plain `pytest` (whose script does not put
the current directory on sys.path) and `verifier check` import the model from there, and leave no
cache inside the suite's folder (installed, that is site-packages)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SUITE = """
    def test_selected(model_spec):
        assert model_spec.name == "mymodel.gpt:build"
"""


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text(textwrap.dedent(SUITE))
    user = tmp_path / "user"
    (user / "mymodel").mkdir(parents=True)
    (user / "mymodel" / "__init__.py").write_text("")
    (user / "mymodel" / "gpt.py").write_text("from verifier.plugin.adapters.reference import build\n")
    return user


def _run(user: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VERIFIER_MODEL", "VERIFIER_SUITE", "PYTHONPATH")}
    return subprocess.run(command, cwd=user, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_plain_pytest_imports_the_model_from_the_invocation_directory(user_dir: Path) -> None:
    pytest_script = Path(sys.executable).with_name("pytest")
    suite = str(user_dir.parent / "suite")
    done = _run(user_dir, str(pytest_script), suite, "--model", "mymodel.gpt:build", "-q", "-p", "no:cacheprovider")
    assert done.returncode == 0, done
    assert "1 passed" in done.stdout, done


def test_verifier_check_keeps_its_cache_out_of_the_suite_folder(user_dir: Path) -> None:
    suite = user_dir.parent / "suite"
    check = ("-m", "verifier", "check", "--suite", str(suite), "--model", "mymodel.gpt:build")
    done = _run(user_dir, sys.executable, *check, "--reports", "out")
    assert done.returncode == 0, done
    assert not (suite / ".pytest_cache").exists()
    assert (user_dir / ".pytest_cache").is_dir() and (user_dir / "out" / "conformance.json").is_file()
