"""What machine a benchmark ran on, for the header of its results."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "unknown"


def memory_gib() -> float:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return float("nan")
    match = re.search(r"^MemTotal:\s*(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) / 2**20 if match else float("nan")


def describe() -> str:
    """One line: CPU, cores, memory, OS, Python and the numeric libraries' versions."""
    import numpy
    import torch
    import transformers

    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, NumPy {numpy.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}"
    )


def high_water_kib(pid: int | str = "self") -> int:
    """VmHWM, the peak resident set of a process's current program (0 once it has exited).

    Not getrusage's ru_maxrss: Linux carries that over fork and exec, so a child would report its
    parent's peak.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """The repository at git `revision`, checked out in a temporary worktree and removed after: a
    benchmark's `--before` measures the code as it was, in the same run as the code as it is."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=root, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, check=True)
