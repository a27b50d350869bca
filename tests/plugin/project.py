"""A throwaway copy of the suite's skeleton, to run pytest and `verifier check` as a user would.

The copy has the root `conftest.py`, `pyproject.toml`, `fixtures/` and `properties/profiles.py` of
this checkout, plus the files a test writes (throwaway properties, a user's fixture file, a
user's model module). Subprocesses import `verifier` from this checkout through PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKELETON = ("conftest.py", "pyproject.toml", "fixtures", "properties/__init__.py", "properties/profiles.py")


def make_project(directory: Path, files: dict[str, str]) -> Path:
    """The skeleton copied into `directory`, with `files` (path -> source, dedented) added."""
    for name in SKELETON:
        source, target = ROOT / name, directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(text))
    return directory


def run(
    project: Path, *args: str, env: dict[str, str] | None = None, pythonpath: tuple[Path, ...] = (), timeout: int = 600
) -> Run:
    """`python *args` in `project`, with this checkout (and `pythonpath`) importable; killed after
    `timeout` seconds (a guard against a hang, not a measure of speed)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("VERIFIER_MODEL", "VERIFIER_SUITE")}
    environ["PYTHONPATH"] = os.pathsep.join(map(str, (*pythonpath, ROOT)))
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable, *args], cwd=project, env=environ, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(done.returncode, done.stdout, done.stderr)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit status {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def junit_cases(path: Path) -> dict[str, dict[str, str]]:
    """{test name: {"outcome": ..., property name: value}} from pytest's JUnit XML."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        cases[case.get("name", "")] = {"outcome": outcome, **props}
    return cases
