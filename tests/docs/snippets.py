"""The code blocks of the documentation pages, and the convention that marks the ones the tests run.

A fenced block right after `<!-- run -->` runs: a `python` block as a program, a `bash` block line by line
in bash (`set -e`). A block right after `<!-- file: NAME -->` is written to NAME and not run (a module the
next blocks import). A page's marked blocks run in order, in one fresh directory. Unmarked blocks are shown,
not run: installs from a package index, CI YAML, commands that need an engine, a checkpoint or a GPU.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(r"(?:^<!-- (run|file: [\w./-]+) -->\n)?^([ \t]*)```(\w*)\n(.*?)^\2```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: Path
    language: str
    code: str
    mark: str | None  # "run", "file: NAME", or None


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, its indentation (inside a list item) removed."""
    return [
        Block(page, language, textwrap.dedent(code), mark or None)
        for mark, _, language, code in _BLOCK.findall(page.read_text(encoding="utf-8"))
    ]


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "gen" not in p.relative_to(DOCS).parts)
