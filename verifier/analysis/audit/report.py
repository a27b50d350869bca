"""The audit as a terminal table and as JSON.

The table names the articles first, then prints the rows group by group: number, claim with its
places, as stated, exact, verdict, and under each row why and how it was checked; then the verdict
rule, and last the summary line. Columns fit 110 characters.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from verifier.analysis.audit.articles import ARTICLES, BY_LABEL, where
from verifier.analysis.audit.claim import Row
from verifier.analysis.audit.verdict import NOT_CHECKABLE, RULE, SKIPPED, VERDICTS, Match

_WIDTHS = (3, 38, 24, 24, 13)  # n, claim, as stated, exact, verdict
_HEADER = ("#", "claim (article line)", "as stated", "exact", "verdict")
_INDENT = " " * (_WIDTHS[0] + 2)
_TEXT_WIDTH = sum(_WIDTHS) + 2 * (len(_WIDTHS) - 1)


def summary(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows have each verdict."""
    return {v: sum(r.verdict == v for r in rows) for v in VERDICTS}


def summary_line(rows: Sequence[Row]) -> str:
    """`95 claims: 62 correct, ..., 0 skipped`: the last line of the table."""
    return f"{len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in summary(rows).items())


def articles_header() -> list[str]:
    lines = ["Articles audited (their claims are encoded in verifier.analysis.audit; the files are not needed):"]
    width = max(len(a.label) for a in ARTICLES) + 4
    for a in ARTICLES:
        lines += [f"  {a.label.ljust(width)}{a.title}", f"  {'':{width}}{a.file}: {a.about}"]
    return lines


def _cells(cells: Sequence[str]) -> list[str]:
    wrapped = [textwrap.wrap(text, width) or [""] for text, width in zip(cells, _WIDTHS, strict=True)]
    lines = []
    for i in range(max(map(len, wrapped))):
        parts = [(cell[i] if i < len(cell) else "").ljust(w) for cell, w in zip(wrapped, _WIDTHS, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _details(row: Row) -> list[str]:
    text = row.why.rstrip(".") + "." if row.why else ""
    for reading in row.readings:
        holds = reading.match in (Match.EXACT, Match.ROUND)
        text += f" Read as {reading.reading}: {'holds' if holds else 'does not hold'}."
    label = "To check" if row.verdict in (NOT_CHECKABLE, SKIPPED) else "Checked"
    text += f" {label}: {row.how}" + (" (arithmetic only)." if row.arithmetic_only else ".")
    return textwrap.wrap(text.strip(), _TEXT_WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT)


def render(rows: Sequence[Row]) -> str:
    """The articles, then every row with its why and how, the summary and the verdict rule."""
    lines = articles_header()
    group = None
    for n, row in enumerate(rows, 1):
        if row.group != group:
            group = row.group
            lines += ["", group, "", *_cells(_HEADER), "  ".join("-" * w for w in _WIDTHS)]
        lines += _cells((str(n), f"{row.claim} ({where(row.places)})", row.stated, row.exact, row.verdict))
        lines += [*_details(row), ""]
    arithmetic = sum(r.arithmetic_only for r in rows)
    lines += ["Verdicts:", *("  " + line for line in RULE.splitlines()), ""]
    lines += [f"{arithmetic} rows check only the article's own arithmetic.", summary_line(rows)]
    return "\n".join(lines)


def to_json(rows: Sequence[Row]) -> dict[str, Any]:
    """Every field of every row, the articles, the summary and the rule."""
    claims = []
    for n, row in enumerate(rows, 1):
        data = asdict(row)
        data["n"] = n
        data["places"] = [
            {**asdict(p), "title": BY_LABEL[p.article].title, "file": BY_LABEL[p.article].file} for p in row.places
        ]
        data["readings"] = [{"reading": r.reading, "match": r.match.value} for r in row.readings]
        claims.append(data)
    return {
        "articles": [asdict(a) for a in ARTICLES],
        "claims": claims,
        "summary": summary(rows),
        "rule": RULE,
    }
