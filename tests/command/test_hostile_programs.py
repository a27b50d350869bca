"""Programs that try to flood, hang or outlive the suite (tests/command/hostile.py) end in one contract
violation naming what they did, read in bounded memory, and leave no process behind.

All modes run in one child process (tests/command/hostile_calls.py) limited to 1 GiB more address space
than it starts with: a program's 1 GiB of output read whole, or a .npy header's 2 GiB claim believed,
would be a MemoryError there instead of the violation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each hostile mode: what it gives, and the violation it must get.
CASES = {
    "flood-stdout": ("logits-text", r"printed more than [\d,]+ bytes on stdout, more than logits-text of 5 tokens"),
    "flood-stderr": ("logits-text", r"exited with status 3; stderr: \.\.\. 1\.0 1\.0"),
    "claims-2gib": ("logits-npy", r"expected \[5, 19\] values, found \[536870912\]"),
    "oversized-npy": ("logits-npy", r"its \.npy file: too large for what it is \(expected at most [\d,]+ bytes"),
    "fifo-npy": ("logits-npy", r"its \.npy file: not a regular file: it is a named pipe \(FIFO\)"),
    "spins": ("logits-text", r"did not finish in 2 s"),
    "holds-stdout": ("logits-text", r"stdout is not numbers"),
    "escapes": ("logits-text", r"exited with status 3"),
}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, str]], Path]:
    directory = tmp_path_factory.mktemp("hostile")
    cases = [f"{mode}:{gives}" for mode, (gives, _) in CASES.items()]
    done = subprocess.run(
        [sys.executable, "-m", "tests.command.hostile_calls", str(directory), *cases],
        cwd=ROOT, capture_output=True, text=True, timeout=300,  # a hang guard: the modes end in seconds
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {row["mode"]: row for row in rows}, directory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and the address-space limit")
@pytest.mark.parametrize("mode", list(CASES))
def test_a_hostile_program_gets_one_bounded_violation_and_leaves_nothing_running(
    mode: str, outcomes: tuple[dict[str, dict[str, str]], Path]
) -> None:
    found, directory = outcomes
    row = found[mode]
    assert row["outcome"] == "violation", row
    message = row["message"]
    assert re.search(CASES[mode][1], message), message
    assert f"model {mode!r} broke the contract rule 'no-exception'" in message
    assert len(message) < 4000, f"{len(message):,} characters"
    pids = directory / f"{mode}.pids"
    left = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    assert not [pid for pid in left if _alive(pid)], f"{mode} left processes running: {left}"
    if mode in ("spins", "holds-stdout", "escapes"):
        assert left, f"{mode} wrote no pid: the check above checked nothing"
