"""What `verifier`, the pytest plugin and the property suite import before a model needs anything: every
test that runs them end to end, and every user's command, pays for it. torch and transformers take
seconds to import (benchmarks/startup.py); only the models that run on them, and the engines, need them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.startup_probe import IMPORT_ALL

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_line_starts_without_hypothesis_torch_or_transformers() -> None:
    # Hypothesis was imported for the profiles' names and by the plugin's registration of them: a
    # third of the command's start-up. torch and transformers take seconds; only the models need them.
    heavy = ("hypothesis", "torch", "transformers")
    code = f"import sys, verifier.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_package_the_plugin_and_the_suite_import_no_extra() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"importing the package, the plugin and the suite imported {done.stdout}"


def test_verifier_check_of_the_numpy_model_imports_no_extra(tmp_path: Path) -> None:
    """`verifier check --model numpy`: its start-up, the plugin's hooks, the collection of the suite and
    the properties of no model (which every run runs, whatever its models) import none of them. The
    numpy model's own properties are left out here, to keep this test fast."""
    out = tmp_path / "imported.txt"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "verifier", "check", "--model", "numpy", "--reports", str(tmp_path / "reports"),
               "--", "-p", "tests.startup_probe", f"--startup-probe={out}", "--startup-probe-no-model",
               "-p", "no:cacheprovider"]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = out.read_text().splitlines() if out.exists() else []
    assert lines and lines[-1].startswith("ran: ") and lines[-1] != "ran: 0 tests", (
        f"no test ran: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    assert lines[:-1] == [], "verifier check --model numpy imported, by what ran:\n" + "\n".join(lines[:-1])
