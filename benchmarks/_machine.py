"""What machine a benchmark ran on, for the header of its results."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import tempfile
import tomllib
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
def worktree(revision: str, *, installed: bool = False) -> Iterator[Path]:
    """The repository at git `revision`, checked out in a temporary worktree and removed after: a
    benchmark's `--before` measures the code as it was, in the same run as the code as it is.
    With `installed`, laid out as the package is installed (`as_installed`), for a run that imports the
    suite or the fixtures with the worktree first on the path."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=root, check=True)
        try:
            if installed:
                as_installed(tree)
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, check=True)


def as_installed(tree: Path) -> None:
    """Link the folders an install maps into the package (`package-dir`: the suite, the fixtures) under
    the package of `tree`: with `tree` first on the path, they too are imported from it rather than
    through this checkout's editable install."""
    mapped = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in mapped.items():
        link = tree.joinpath(*package.split("."))
        if not link.exists():
            link.symlink_to(tree / folder, target_is_directory=True)
