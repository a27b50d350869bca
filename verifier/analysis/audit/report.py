"""The audit as a terminal table, as Markdown and as JSON.

The table names the articles first, then prints the rows group by group: number, claim with its
places, as stated, exact, verdict, and under each row why and how it was checked; then the verdict
rule, and last the summary line; the claims deliberately not checked, with why, come before the rule.
Columns fit 110 characters. A row keeps its number in the whole
audit when only some rows are printed (`select`), so that a number names one claim.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Sequence
from dataclasses import asdict
from typing import Any

from verifier.analysis.audit.articles import ARTICLES, BY_LABEL, where
from verifier.analysis.audit.claim import Row
from verifier.analysis.audit.claims import NotChecked
from verifier.analysis.audit.verdict import NOT_CHECKABLE, RULE, SKIPPED, VERDICTS, Match

_WIDTHS = (3, 38, 24, 24, 13)  # n, claim, as stated, exact, verdict
_HEADER = ("#", "claim (article line)", "as stated", "exact", "verdict")
_INDENT = " " * (_WIDTHS[0] + 2)
_TEXT_WIDTH = sum(_WIDTHS) + 2 * (len(_WIDTHS) - 1)


def select(
    rows: Sequence[Row], articles: Collection[str] = (), verdicts: Collection[str] = ()
) -> list[tuple[int, Row]]:
    """The rows (numbered as in the whole audit) with a place in one of `articles` and one of
    `verdicts`; an empty collection selects every row."""
    return [
        (n, row)
        for n, row in enumerate(rows, 1)
        if (not articles or any(p.article in articles for p in row.places))
        and (not verdicts or row.verdict in verdicts)
    ]


def _numbered(rows: Sequence[Row] | Sequence[tuple[int, Row]]) -> list[tuple[int, Row]]:
    return [r if isinstance(r, tuple) else (n, r) for n, r in enumerate(rows, 1)]


def summary(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows have each verdict."""
    return {v: sum(r.verdict == v for r in rows) for v in VERDICTS}


def summary_line(rows: Sequence[Row]) -> str:
    """`95 claims: 62 correct, ..., 0 skipped`: the last line of the table."""
    claims = "claim" if len(rows) == 1 else "claims"
    return f"{len(rows)} {claims}: " + ", ".join(f"{n} {v}" for v, n in summary(rows).items())


def arithmetic_line(rows: Sequence[Row]) -> str:
    """`2 rows check only the article's own arithmetic.` (a filtered table may show one)."""
    n = sum(r.arithmetic_only for r in rows)
    return f"{n} {'row checks' if n == 1 else 'rows check'} only the article's own arithmetic."


def articles_header() -> list[str]:
    lines = ["Articles audited (their claims are rows of verifier/data/audit/claims.toml; the files are not needed):"]
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


def _explained(row: Row) -> str:
    """Why, the other readings and how it was checked, as one paragraph."""
    text = row.why.rstrip(".") + "." if row.why else ""
    for reading in row.readings:
        holds = reading.match in (Match.EXACT, Match.ROUND)
        text += f" Read as {reading.reading}: {'holds' if holds else 'does not hold'}."
    label = "To check" if row.verdict in (NOT_CHECKABLE, SKIPPED) else "Checked"
    text += f" {label}: {row.how}" + (" (arithmetic only)." if row.arithmetic_only else ".")
    return text.strip()


def render(rows: Sequence[Row] | Sequence[tuple[int, Row]], not_checked: Sequence[NotChecked] = ()) -> str:
    """The articles, then every row (numbered, or given with its number) with its why and how, the
    claims not checked, the verdict rule and the summary."""
    numbered = _numbered(rows)
    lines = articles_header()
    group = None
    for n, row in numbered:
        if row.group != group:
            group = row.group
            lines += ["", group, "", *_cells(_HEADER), "  ".join("-" * w for w in _WIDTHS)]
        lines += _cells((str(n), f"{row.claim} ({where(row.places)})", row.stated, row.exact, row.verdict))
        lines += [*textwrap.wrap(_explained(row), _TEXT_WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT), ""]
    if not_checked:
        lines += ["Not checked, on purpose:", ""]
        for item in not_checked:
            text = f"{item.claim} ({where(item.places)}): {item.why}."
            lines += textwrap.wrap(text, _TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")
        lines.append("")
    shown = [row for _, row in numbered]
    lines += ["Verdicts:", *("  " + line for line in RULE.splitlines()), ""]
    lines += [arithmetic_line(shown), summary_line(shown)]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a '|' would end the cell."""
    return text.replace("|", "\\|")


def markdown(rows: Sequence[Row] | Sequence[tuple[int, Row]], not_checked: Sequence[NotChecked] = ()) -> str:
    """The audit as Markdown: the articles, a table per group with why and how, the claims not checked,
    the rule and the summary."""
    numbered = _numbered(rows)
    lines = ["# The articles' claims", "", "| label | article | file |", "| --- | --- | --- |"]
    lines += [f"| {a.label} | {_cell(a.title)} | {a.file}: {_cell(a.about)} |" for a in ARTICLES]
    group = None
    for n, row in numbered:
        if row.group != group:
            group = row.group
            lines += ["", f"## {group}", "", "| # | claim | as stated | exact | verdict | why, how |"]
            lines.append("| --- | --- | --- | --- | --- | --- |")
        cells = (f"{row.claim} ({where(row.places)})", row.stated, row.exact, row.verdict, _explained(row))
        lines.append(f"| {n} | " + " | ".join(_cell(c) for c in cells) + " |")
    if not_checked:
        lines += ["", "## Not checked, on purpose", "", "| claim | why |", "| --- | --- |"]
        lines += [f"| {_cell(f'{c.claim} ({where(c.places)})')} | {_cell(c.why)} |" for c in not_checked]
    shown = [row for _, row in numbered]
    lines += ["", "## Verdicts", "", "```", RULE, "```", ""]
    lines += [arithmetic_line(shown), ""]
    lines.append(summary_line(shown))
    return "\n".join(lines)


def to_json(rows: Sequence[Row] | Sequence[tuple[int, Row]], not_checked: Sequence[NotChecked] = ()) -> dict[str, Any]:
    """Every field of every row, the claims not checked, the articles, the summary and the rule."""
    numbered = _numbered(rows)
    claims = []
    for n, row in numbered:
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
        "not_checked": [{**asdict(c), "places": [asdict(p) for p in c.places]} for c in not_checked],
        "summary": summary([row for _, row in numbered]),
        "rule": RULE,
    }
