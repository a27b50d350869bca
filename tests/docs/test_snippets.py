"""Every example the documentation marks as runnable runs (see tests/docs/snippets.py for the convention):
the tutorial's model, its comparison with the oracle and its `verifier check` runs, the API examples.
What is not marked is not run; of those, every `verifier ...` command line shown in a bash block is parsed
by the real argument parser, so an option renamed or removed breaks this test rather than the reader."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import DOCS, blocks, pages
from verifier.cli import build_parser

ROOT = DOCS.parent
RUNNABLE = [page for page in pages() if any(b.mark for b in blocks(page))]
# Pages whose examples run `verifier check` take tens of seconds each: the slow tier runs them.
SLOW = {page for page in RUNNABLE if any("verifier check" in b.code for b in blocks(page) if b.mark == "run")}


def test_the_convention_marks_some_blocks_of_the_tutorial() -> None:
    assert DOCS / "tutorial.md" in RUNNABLE


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW else [], id=str(p.relative_to(DOCS))) for p in RUNNABLE],
)
def test_the_marked_examples_of_a_page_run(page: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    for n, block in enumerate(blocks(page)):
        if block.mark is None:
            continue
        if block.mark.startswith("file: "):
            (tmp_path / block.mark.removeprefix("file: ")).write_text(block.code, encoding="utf-8")
            continue
        if block.language == "python":
            command = [sys.executable, "-c", block.code]
        else:
            assert block.language == "bash", f"{page.name}: a marked block must be python or bash"
            command = ["bash", "-e", "-c", block.code]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        output = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, f"{page.name}, block {n}:\n{block.code}\n{output}"


def _shown_commands() -> list[tuple[str, str]]:
    """(page, command line) of every `verifier` command shown in a bash block or a `$ ` console line."""
    found = []
    for page in pages():
        for block in blocks(page):
            if block.language not in ("bash", "", "text"):
                continue
            for line in block.code.replace("\\\n", " ").splitlines():
                line = line.strip()
                if block.language != "bash" and not line.startswith("$ "):
                    continue  # output, not a command
                line = line.removeprefix("$ ")
                line = line.split("  #")[0].split(" # ")[0].split(" || ")[0].split(" | ")[0]
                for part in line.split(" && "):
                    part = part.strip()
                    if part.startswith(("verifier ", ".venv/bin/verifier ")):
                        found.append((str(page.relative_to(DOCS)), part))
    return found


@pytest.mark.parametrize(("page", "line"), _shown_commands())
def test_every_verifier_command_shown_parses(page: str, line: str) -> None:
    words = shlex.split(line)[1:]
    try:
        build_parser().parse_args(words)
    except SystemExit as e:
        if e.code == 0:  # --version, --help
            return
        pytest.fail(f"{page}: `{line}` does not parse (exit {e.code})")
