"""Running the property suite on one plugged-in model, exactly as a user would, and reading its report."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from tests.meta.mutants.catalog import MUTANTS
from verifier.report.results import Report

ROOT = Path(__file__).resolve().parents[2]
CATALOG = "tests.meta.mutants.catalog"
CORRECT = f"{CATALOG}:correct"
CONSTRAINED = "tests.meta.mutants.constrained"
CONSTRAINED_CORRECT = f"{CONSTRAINED}:correct"
# Each mutant's bug in one sentence: the first sentence of its docstring.
DOCS = {cls.__name__: " ".join((cls.__doc__ or "").split()).split(". ")[0].rstrip(".") for cls in MUTANTS}


def mutant_spec(name: str, precision: str = "float32") -> str:
    """The `--model` spec of a catalog mutant (or of the correct base, `correct`) computing at `precision`."""
    if precision == "float32":
        return CORRECT if name == "correct" else f"{CATALOG}:mutants.{name}"
    return f"{CATALOG}:at.{precision}.{name}"


def effect_spec(name: str, precision: str) -> str:
    """The `--model` spec of a mutant computed in float32 and judged at `precision`'s bounds."""
    return f"{CATALOG}:exact_at.{precision}.{name}"


def constrained_spec(name: str) -> str:
    """The `--model` spec of a catalog mutant as constrained code runs it (tests/meta/mutants/constrained.py)."""
    return f"{CONSTRAINED}:constrained.{name}"


def run_suite(
    model: str | Sequence[str], reports: Path, *pytest_args: str, profile: str = "ci", timeout: float = 1800
) -> Report:
    """`verifier check --model MODEL` (pytest underneath; a `--model` each where `model` is several) and
    the report it wrote into `reports`; pytest's JUnit XML, with the full failure messages, is
    `reports / "junit.xml"` (`junit_failures`). Killed after `timeout` seconds (a guard against a hang)."""
    models = [a for spec in ([model] if isinstance(model, str) else model) for a in ("--model", spec)]
    command = [
        sys.executable, "-m", "verifier", "check", *models, "--reports", str(reports),
        "--hypothesis-profile", profile, "--", "-p", "no:cacheprovider", f"--junitxml={reports / 'junit.xml'}",
        *pytest_args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    path = reports / "conformance.json"
    if not path.exists():
        raise AssertionError(f"`{' '.join(command)}` wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Report.read(path)


def session_dir(factory: pytest.TempPathFactory) -> Path:
    """The temporary directory every pytest-xdist worker of this session shares (without xdist, the session's)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # a worker's is `popen-gwN` in it


class Batch:
    """Many models' `run_suite` runs, a chunk of `size` models a `verifier check`, each chunk run once
    for all of a session's pytest-xdist workers (their reports are in `root`, which they share:
    `session_dir`; a file lock per chunk). A test asks for its model's chunk; a worker that finds that
    chunk being run by another runs a chunk nobody has started instead of waiting, so two workers
    share a batch's work. (xdist's own groups, `--dist loadgroup`, do not hold with pytest 9.2 and
    xdist 3.8.0: xdist renames `item._nodeid`, which pytest 9.2's node ids no longer read.)"""

    def __init__(
        self, root: Path, specs: Sequence[str], *pytest_args: str, profile: str = "ci", timeout: float = 1800,
        size: int = 13,
    ) -> None:  # fmt: skip
        self.root = root
        self.root.mkdir(exist_ok=True)
        self.chunks = [list(specs[i : i + size]) for i in range(0, len(specs), size)]
        self.pytest_args, self.profile, self.timeout = pytest_args, profile, timeout

    def report(self, spec: str) -> Report:
        """The report of the run that holds the model `spec`; an `AssertionError` where it wrote none."""
        (wanted,) = [i for i, chunk in enumerate(self.chunks) if spec in chunk]
        while not (self.root / f"{wanted}.done").exists():
            others = [i for i in range(len(self.chunks)) if i != wanted and not (self.root / f"{i}.done").exists()]
            if not any(self._run_unless_running(i) for i in [wanted, *others]):
                with FileLock(self.root / f"{wanted}.lock"):  # every chunk left is running: wait for ours
                    pass
        error = (self.root / f"{wanted}.done").read_text()
        if error:
            raise AssertionError(error)
        return Report.read(self.root / str(wanted) / "conformance.json")

    def _run_unless_running(self, index: int) -> bool:
        """Run chunk `index` unless another worker is running it or has run it; whether this one ran it."""
        lock = FileLock(self.root / f"{index}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return False
        try:
            done = self.root / f"{index}.done"
            if done.exists():
                return False
            reports = self.root / str(index)
            reports.mkdir(exist_ok=True)
            try:
                run_suite(self.chunks[index], reports, *self.pytest_args, profile=self.profile, timeout=self.timeout)
                error = ""
            except (AssertionError, subprocess.TimeoutExpired) as e:
                error = str(e)  # every test of the chunk fails with it, none runs the chunk again
            partial = done.with_suffix(".partial")
            partial.write_text(error)
            partial.replace(done)  # a chunk is done once its whole verdict is there
        finally:
            lock.release()
        return True


def junit_failures(reports: Path) -> dict[str, str]:
    """The whole failure message of each failed test of a `run_suite` run, by its id's parameter (the
    model's spec: `test_x[SPEC]` -> SPEC)."""
    failures = {}
    for case in ET.parse(reports / "junit.xml").iter("testcase"):
        failure = case.find("failure")
        if failure is not None:
            parameter = case.get("name", "").partition("[")[2].removesuffix("]")
            failures[parameter] = f"{failure.get('message', '')}\n{failure.text or ''}"
    return failures
