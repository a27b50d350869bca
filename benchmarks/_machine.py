"""What machine a benchmark ran on, for the header of its results."""

from __future__ import annotations

import os
import platform
import re
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
