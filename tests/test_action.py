"""The GitHub action (action.yml) and the example workflow that uses it: GitHub is out of reach, so
the action's structure is checked and its shell steps run here with bash, a fake job summary and a
throwaway suite."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
WORKFLOW = yaml.safe_load((ROOT / "examples/github-actions/verify-model.yml").read_text())
SUITE = """
    def test_selected(model_spec):
        assert model_spec.name in ("mymodel.gpt:build", "numpy")
"""


def _step(name: str) -> dict[str, Any]:
    return next(step for step in ACTION["runs"]["steps"] if step.get("name") == name)


def _run_step(name: str, inputs: dict[str, str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A `run` step as the runner runs it: `bash -e -o pipefail`, its env's `${{ inputs.X }}` resolved."""
    values = {key: spec.get("default", "") for key, spec in ACTION["inputs"].items()} | inputs
    step = _step(name)
    resolved = {
        key: re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: values[m.group(1)], value)
        for key, value in step.get("env", {}).items()
    }
    assert "${{" not in step["run"], "inputs reach the script through env, never pasted into it"
    environ = {k: v for k, v in os.environ.items() if k not in ("VERIFIER_MODEL", "PYTHONPATH")}
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ['PATH']}"  # where `verifier` is
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]],
        cwd=cwd,
        env=environ | resolved | env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_action_is_a_composite_with_a_required_model_and_uploads_the_reports() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert ACTION["inputs"]["model"]["required"] is True
    steps = ACTION["runs"]["steps"]
    assert all(step.get("shell") == "bash" for step in steps if "run" in step)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "${{ inputs.reports }}/"
    assert _step("Conformance table in the job summary")["if"] == "always()"


def test_the_example_workflow_uses_the_action_with_a_model() -> None:
    steps = WORKFLOW["jobs"]["conformance"]["steps"]
    (action,) = [step for step in steps if step.get("uses", "").startswith("lm-verifier/lm-verifier@")]
    assert set(action["with"]) <= set(ACTION["inputs"]) and action["with"]["model"] == "my_model.plugin:build"


def test_the_install_step_installs_the_suite_and_the_repository(tmp_path: Path) -> None:
    log = tmp_path / "pip.log"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"GITHUB_ACTION_PATH": str(ROOT), "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    done = _run_step("Install lm-verifier and the model", {"install": ". -r requirements.txt"}, tmp_path, env)
    assert done.returncode == 0, done
    index = "https://download.pytorch.org/whl/cpu"
    assert log.read_text().splitlines() == [
        f"-m pip install --extra-index-url {index} {ROOT}",
        f"-m pip install --extra-index-url {index} . -r requirements.txt",
    ]


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_one.py").write_text(textwrap.dedent(SUITE))
    user = tmp_path / "user"
    (user / "mymodel").mkdir(parents=True)
    (user / "mymodel" / "__init__.py").write_text("")
    (user / "mymodel" / "gpt.py").write_text("from verifier.plugin.adapters.reference import build\n")
    return user


def test_the_check_and_summary_steps_write_the_table_to_the_job_summary(user_dir: Path) -> None:
    summary = user_dir / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "VERIFIER_SUITE": str(user_dir.parent / "suite")}
    inputs = {"model": "mymodel.gpt:build, numpy", "pytest-args": "-q"}
    checked = _run_step("Run the property suite", inputs, user_dir, env)
    assert checked.returncode == 0, checked
    assert (user_dir / "reports" / "conformance.json").is_file()
    assert _run_step("Conformance table in the job summary", inputs, user_dir, env).returncode == 0
    table = summary.read_text()
    assert "| `test_one.py::test_selected` | pass" in table and "mymodel.gpt:build" in table and "numpy" in table


def test_a_check_that_could_not_start_fails_the_step_and_says_so_in_the_summary(user_dir: Path) -> None:
    summary = user_dir / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "VERIFIER_SUITE": str(user_dir.parent / "suite")}
    inputs = {"model": "nowhere.gpt:build"}
    assert _run_step("Run the property suite", inputs, user_dir, env).returncode == 2
    assert _run_step("Conformance table in the job summary", inputs, user_dir, env).returncode == 0
    assert "no conformance report" in summary.read_text()
