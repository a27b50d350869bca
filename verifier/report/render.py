"""The conformance table as text (for the terminal) and Markdown (for files and CI summaries).

Rows are properties, columns are models (headed with their precision class where it is not
float32: the ratios of a column are against that class's bounds); a cell reads `pass 0.012` (the
worst error / tolerance ratio, where the property measured one), `FAIL 3.1e+04 from layers.0.scores [2]`
(with the first divergent stage where a trace localized it), `skip [1]`. Numbered notes give each
skip's reason and each failure's whole message, first divergent stage and case; a reason or a
contract breach that several properties of a model share is one note. Then each model's verdict
(conforms / fails / untested) with its counts, and the summary.

The terminal (`text`) puts the verdict last: one paragraph per failure first, then the header, the
table (without the rows that passed on every model, when something failed) and the skips' notes,
then the verdicts and the summary.

A property that met router near-ties (a MoE model's top-k choice within the precision class's bound,
`properties/oracle.py`) says so: how many and how they were judged, in a failure's paragraph heading,
else one line each after the table (when something failed, one line counting them, so that a failing
run stays on a screen), in the HTML page's cell and in the Markdown's list of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from verifier.report.results import FAILING, Report, Result

NO_MODEL = "(no model)"
# xfail: a declared deviation happened (`verifier.Deviation`); xpass: one did not, or pytest's own xfail passed.
_LABELS = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skip": "skip", "xfail": "deviates", "xpass": "xpass"}


@dataclass
class Table:
    """The matrix of a report: property x model -> result, with the numbered notes of its cells."""

    properties: list[str]
    models: list[str]
    cells: dict[tuple[str, str], str]
    notes: list[tuple[list[Result], str]]  # (the results a note is for, its text), numbered from 1
    headings: dict[str, str] = field(default_factory=dict)  # model -> its column heading
    near_ties: dict[tuple[str, str], str] = field(default_factory=dict)  # (property, model) -> `near_tie_line`

    def heading(self, model: str) -> str:
        """The model's name, and its precision class where it is not float32: `m (bfloat16)`."""
        return self.headings.get(model, model)

    def note_heading(self, n: int) -> str:
        """`property / model` of note n (from 1); for a note several share, `model, k properties`,
        or for a failure `model, k properties: p1, p2, ...` (which properties a breach affected)."""
        results, _ = self.notes[n - 1]
        model = results[0].model or NO_MODEL
        if len(results) == 1:
            return f"{results[0].property} / {model}"
        heading = f"{model}, {len(results)} properties"
        if results[0].outcome in FAILING:
            heading += ": " + ", ".join(r.property for r in results)
        return heading


def _note(result: Result) -> str:
    where = f"first divergent stage {result.first_divergent_stage}; " if result.first_divergent_stage else ""
    case = f"\ncase:\n{result.case}" if result.case else ""
    return where + (result.detail or "(no message)") + case


def table(report: Report) -> Table:
    """Arrange `report.results` as property x model, properties in run order."""
    properties = list(dict.fromkeys(r.property for r in report.results))
    seen = list(dict.fromkeys(r.model or NO_MODEL for r in report.results))
    declared = [m.name for m in report.header.models]
    models = [m for m in declared if m in seen] + [m for m in seen if m not in declared]
    cells: dict[tuple[str, str], str] = {}
    notes: list[tuple[list[Result], str]] = []
    numbers: dict[tuple[str, str], int] = {}  # (model, note text) -> its number, so repeated reasons share one
    by_cell = {(r.property, r.model or NO_MODEL): r for r in report.results}
    for prop in properties:
        for model in models:
            result = by_cell.get((prop, model))
            if result is None:
                continue
            parts = [_LABELS[result.outcome]]
            if result.worst_error_ratio is not None:
                parts.append(f"{result.worst_error_ratio:.3g}")
            if result.first_divergent_stage and result.outcome in FAILING:
                parts.append(f"from {result.first_divergent_stage}")
            if result.outcome != "pass":
                # One note per contract rule a model broke, however many properties met the breach.
                breach = result.contract_rule and result.outcome in FAILING
                key = (model, f"contract rule {result.contract_rule}" if breach else _note(result))
                if key not in numbers:
                    notes.append(([], _note(result)))
                    numbers[key] = len(notes)
                notes[numbers[key] - 1][0].append(result)
                parts.append(f"[{numbers[key]}]")
            cells[prop, model] = " ".join(parts)
    classes = {v.model: v.precision for v in report.verdicts()}
    headings = {m: f"{m} ({classes[m]})" for m in models if classes.get(m, "float32") != "float32"}
    near_ties = {cell: near_tie_line(r) for cell, r in by_cell.items() if r.near_ties}
    return Table(properties, models, cells, notes, headings, near_ties)


_VERDICTS = {
    "conforms": "conforms",
    "deviates": "deviates as declared",
    "fails": "does not conform",
    "untested": "untested: not conforming",
}


def summary(report: Report) -> str:
    """`12 pass, 1 fail, 3 skip: does not conform` (or `conforms`, or `untested: not conforming`)."""
    counts = ", ".join(f"{n} {outcome}" for outcome, n in report.counts().items()) or "no tests ran"
    return f"{report.stopped + ': ' if report.stopped else ''}{counts}: {_VERDICTS[report.verdict]}"


def verdict_lines(report: Report) -> list[str]:
    """One line per model: `numpy: conforms (20 properties run: 20 pass, 0 fail; 6 skip; 1,234 examples)`,
    and for an untested model the reason."""
    lines = []
    for v in report.verdicts():
        run = f"{v.run} {'property' if v.run == 1 else 'properties'} run"
        deviated = f"{v.deviated} deviate (declared), " if v.deviated else ""
        counts = f"{run}: {v.passed} pass, {deviated}{v.failed} fail; {v.skipped} skip; {v.examples:,} examples"
        label = v.verdict.upper() if v.verdict in ("fails", "untested") else v.verdict
        name = v.model if v.precision == "float32" else f"{v.model} ({v.precision})"
        line = f"{name}: {label} ({counts})" + (f"; {v.reason}" if v.reason else "")
        if v.behaves_like:
            like, failures = v.behaves_like.split(" ", 1)
            line += (
                f"; it declares no precision, and the errors of its failures follow {like}'s rounding {failures}: it "
                f"behaves like {like} (if it computes in {like}, declare precision = {like!r})"
            )
        lines.append(line)
    return lines


def near_tie_line(result: Result) -> str:
    """The first line of `result.near_ties`: how many router near-ties it met and how they were judged."""
    return result.near_ties.split("\n", 1)[0]


def near_tie_lines(report: Report, *, fold: bool = False) -> list[str]:
    """One line per property and model that met router near-ties and did not fail (a failure's paragraph
    says it): `p / m: 2 router near-ties met; either choice accepted, ...`; with `fold`, one line
    counting them."""
    met = [r for r in report.results if r.near_ties and r.outcome not in FAILING]
    if fold and met:
        return [f"router near-ties met by {len(met)} more {'property' if len(met) == 1 else 'properties'}, either "
                "choice accepted: each is in the report files"]  # fmt: skip
    return [f"{r.property} / {r.model or NO_MODEL}: {near_tie_line(r)}" for r in met]


def left_out_lines(report: Report) -> list[str]:
    """One line per registered model that could not run here: no verdict, and the reason."""
    return [f"{name}: not tested here (no verdict): {why}" for name, why in report.header.unavailable.items()]


def header_lines(report: Report) -> list[tuple[str, str]]:
    """(label, value) lines of the header; a model's probe lines have an empty label."""
    h = report.header
    settings = ", ".join(f"{k}={v}" for k, v in h.hypothesis_settings.items())
    lines = [
        ("suite", h.suite),
        ("hypothesis", f"profile {h.hypothesis_profile} ({settings})"),
        ("versions", ", ".join(f"{name} {version}" for name, version in h.versions.items())),
    ]
    if h.checkpoint:
        lines.insert(1, ("checkpoint", h.checkpoint))
    for card in h.models:
        lines.append(("model", f"{card.name} ({card.origin})"))
        lines.append(("", f"  precision: {card.precision}" + ("" if card.declared else " (declares none)")))
        kinds_by_summary: dict[str, list[str]] = {}
        for kind, probe in card.probes.items():
            kinds_by_summary.setdefault(probe, []).append(kind)
        lines.extend(("", f"  {', '.join(kinds)}: {probe}") for probe, kinds in kinds_by_summary.items())
        if card.not_run:  # found after it failed (`verifier.plugin.diagnosis`)
            lines.append(("", f"  accepted but not run: {card.not_run}"))
            lines.append(("", f"  what it runs, declared: {card.declare}"))
    return lines


def text(report: Report, written: Sequence[Path] = ()) -> str:
    """The report for a terminal, its verdict last: one paragraph per failure, the header (without
    the suite and versions, which the files hold), the table (when something failed, the rows that
    passed on every model counted in one line), the other notes, each model's verdict and the
    summary, which names the report files `written`."""
    t = table(report)
    failures = [n for n, (results, _) in enumerate(t.notes, 1) if results[0].outcome in FAILING]
    lines = [line for n in failures for line in _paragraph(t, n)]
    if lines:
        lines.append("")
    lines += [f"{label:<11}{value}" for label, value in header_lines(report) if label not in ("suite", "versions")]
    properties = t.properties
    if failures:
        properties = [p for p in t.properties if any(_cell_outcome(t, p, m) not in ("pass", None) for m in t.models)]
    rows = [["property", *map(t.heading, t.models)]]
    rows += [[p, *(t.cells.get((p, m), "-") for m in t.models)] for p in properties]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines.append("")
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(properties) < len(t.properties):
        folded = len(t.properties) - len(properties)
        lines.append(f"(and {folded} {'property' if folded == 1 else 'properties'} that passed on every model: the "
                     "whole table is in the report files)")  # fmt: skip
    others = [n for n in range(1, len(t.notes) + 1) if n not in failures]
    if others:
        lines.append("")
    for n in others:
        first, *rest = t.notes[n - 1][1].splitlines() or [""]
        lines.append(f"[{n}] {t.note_heading(n)}: {first}")
        lines += [f"    {line}" for line in rest]
    ties = near_tie_lines(report, fold=bool(failures))
    lines += ["", *ties] if ties else []
    files = f"; reports written: {', '.join(map(str, written))}" if written else ""
    lines += ["", *verdict_lines(report), *left_out_lines(report), summary(report) + files]
    return "\n".join(lines)


def _cell_outcome(t: Table, prop: str, model: str) -> str | None:
    cell = t.cells.get((prop, model))
    return None if cell is None else cell.split(" ", 1)[0].lower()


_LONG_CASE_LINE = 240  # characters of a case line the terminal shows (a long prompt's ids); the files hold all


def _paragraph(t: Table, n: int) -> list[str]:
    """Note n, a failure, as the terminal shows it: `[n] FAIL property / model: worst error ...x the
    <class> bound; first divergent stage <stage>`, the failure's message (without the property and
    model it repeats, nor the stage's line) and the case to reproduce it on one line (Python statements)."""
    results, _ = t.notes[n - 1]
    result = results[0]
    facts = []
    if result.worst_error_ratio is not None:
        facts.append(f"worst error {result.worst_error_ratio:.3g}x the {result.precision or 'float32'} bound")
    if result.first_divergent_stage:
        facts.append(f"first divergent stage {result.first_divergent_stage}")
    if result.near_ties:  # a clause, not a line: the paragraph keeps its length
        facts.append(near_tie_line(result))
    head = f"[{n}] {_LABELS[result.outcome]} {t.note_heading(n)}" + (f": {'; '.join(facts)}" if facts else "")
    body = _statement(result).splitlines() or ["(no message)"]
    if result.first_divergent_stage:  # the heading names it; its errors stage by stage are in the report files
        body = [line for line in body if not line.startswith("first divergent stage: ")] or body
    if result.case:
        case = [line if len(line) <= _LONG_CASE_LINE else line[: _LONG_CASE_LINE - 5] + " ..." for line in
                result.case.splitlines()]  # fmt: skip
        body.append("case: " + "; ".join(case))
    return [head, *(f"    {line}" for line in body)]


def _statement(result: Result) -> str:
    """The failure's message without the `<test>: model '<model>' (<class>), ` it opens with (the
    paragraph's heading says them)."""
    test = result.property.split("::")[-1].split("[")[0]
    opening = rf"^{re.escape(test)}: model {re.escape(repr(result.model))} \([^)]*\), "
    return re.sub(opening, "", result.detail or "")


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def markdown(report: Report) -> str:
    """The report as Markdown: the summary and each model's verdict first (what a CI job summary
    shows at a glance), then the header list, the table, and the notes with whole messages."""
    t = table(report)
    out = ["# Conformance report", "", f"**{summary(report)}**", ""]
    out += [f"- {line}" for line in [*verdict_lines(report), *left_out_lines(report)]]
    out += ["", "## Run", ""]
    for label, value in header_lines(report):
        out.append(f"- **{label}**: `{value}`" if label else f"  - `{value.strip()}`")
    out += ["", f"| property | {' | '.join(_md_cell(t.heading(m)) for m in t.models)} |"]
    out.append("|---" * (len(t.models) + 1) + "|")
    for p in t.properties:
        out.append(f"| `{_md_cell(p)}` | {' | '.join(_md_cell(t.cells.get((p, m), '-')) for m in t.models)} |")
    ties = [f"- {line}" for line in near_tie_lines(report)]
    ties += [f"- {r.property} / {r.model or NO_MODEL} ({r.outcome}): {near_tie_line(r)}" for r in report.results
             if r.near_ties and r.outcome in FAILING]  # fmt: skip
    if ties:
        out += ["", "## Router near-ties", "", *ties]
    if t.notes:
        out += ["", "## Notes", ""]
    for n, (results, note) in enumerate(t.notes, 1):
        first, *rest = note.splitlines() or [""]
        out.append(f"{n}. {t.note_heading(n)} ({results[0].outcome}): {_md_cell(first)}")
        if rest:
            out += ["", "   ```", *(f"   {line}" for line in rest), "   ```", ""]
    return "\n".join([*out, ""])
