"""Running the property suite on one plugged-in model, exactly as a user would, and reading its report."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

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
