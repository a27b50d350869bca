"""What `verifier` imports before it parses its command line: every test that runs it end to end, and
every user's command, pays for it."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_starts_without_hypothesis_torch_or_transformers() -> None:
    # Hypothesis was imported for the profiles' names and by the plugin's registration of them: a
    # third of the command's start-up. torch and transformers take seconds; only the models need them.
    heavy = ("hypothesis", "torch", "transformers")
    code = f"import sys, verifier.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
