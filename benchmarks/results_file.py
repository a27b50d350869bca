"""benchmarks/RESULTS.md: each benchmark script owns one `## ` section and rewrites only that one;
and benchmarks/data/: the figures of that run as JSON, from which the docs site draws its plots."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
DATA = Path(__file__).resolve().parent / "data"


def write_data(name: str, payload: dict[str, Any], directory: Path = DATA) -> None:
    """benchmarks/data/NAME.json: a run's figures (with its machine, command and date), atomically."""
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def read_section(heading: str, path: Path = RESULTS) -> str:
    """The section headed `heading` (a `## ` line) as it stands, or "" if there is none."""
    text = path.read_text() if path.exists() else ""
    found = _section(heading).search(text)
    return found.group(0) if found else ""


def _section(heading: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace the section headed by `text`'s first line (a `## ` heading), or append it; atomically."""
    heading = text.splitlines()[0]
    if not heading.startswith("## "):
        raise ValueError(f"a section starts with a '## ' heading, found {heading!r}")
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    pattern = _section(heading)
    body = text.rstrip("\n") + "\n"
    new = pattern.sub(lambda _: body + "\n", old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + body
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new.rstrip("\n") + "\n")
    tmp.replace(path)


def emit(section: str, *, write: bool) -> None:
    """Print a benchmark's Markdown `section`, and with `write` put it into RESULTS.md (`write_section`)."""
    print(section)
    if write:
        write_section(section)
