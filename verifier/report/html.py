"""The conformance report as one self-contained HTML page (no external files): the verdicts, the
header, the property x model table with colored cells (a failure's first divergent stage in its
cell, each cell's note number a link to the note, the router near-ties a property met below its
outcome), each note's whole message, and the
error-per-stage plot of each localized failure inline as an SVG data URI. Readable as a CI artifact."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from html import escape

from verifier.report import plot, render
from verifier.report.results import Report, Result

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table.matrix { border-collapse: collapse; margin: 1em 0; }
.matrix th, .matrix td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: left; }
.matrix td { font-family: monospace; white-space: nowrap; }
td.pass { background: #d4f4d4; }
td.xfail { background: #f4e4c8; }
td.fail, td.error, td.xpass { background: #f8c8c8; font-weight: bold; }
td.skip { background: #f4f0c8; }
td.none { color: #999; }
small.near-ties { font-family: system-ui, sans-serif; color: #555; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.conforms { color: #060; } .deviates { color: #850; } .fails, .untested { color: #a00; } .left-out { color: #666; }
"""


def _cell_class(cell: str) -> str:
    """The outcome a cell's text starts with (`pass 0.012`, `FAIL ... [2]`, `skip [1]`), or `none`."""
    word = cell.split(" ", 1)[0].lower()
    word = "xfail" if word == "deviates" else word  # a declared deviation (render's label for xfail)
    return word if word in ("pass", "fail", "error", "skip", "xfail", "xpass") else "none"


_NOTE_NUMBER = re.compile(r" \[(\d+)\]$")


def _cell(cell: str) -> str:
    """A table cell, its trailing note number `[n]` a link to note n."""
    text = escape(cell)
    return _NOTE_NUMBER.sub(lambda m: f' <a href="#note-{m[1]}">[{m[1]}]</a>', text)


def _td(t: render.Table, prop: str, model: str) -> str:
    """The cell of `prop` on `model`, with the router near-ties it met (how many, how judged) below its outcome."""
    cell = t.cells.get((prop, model), "-")
    ties = t.near_ties.get((prop, model))
    below = f'<br><small class="near-ties">{escape(ties)}</small>' if ties else ""
    return f'<td class="{_cell_class(cell)}">{_cell(cell)}{below}</td>'


def html(report: Report, svg: Callable[[Result], str] = plot.stage_errors_svg) -> str:
    """The whole page; `svg` draws a failure's stage errors (`write_reports` gives one that keeps them)."""
    t = render.table(report)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', "<title>Conformance report</title>"]
    out += [f"<style>{_STYLE}</style></head><body>", "<h1>Conformance report</h1>"]
    out.append(f'<p class="{report.verdict}"><strong>{escape(render.summary(report))}</strong></p><ul>')
    for verdict, line in zip(report.verdicts(), render.verdict_lines(report), strict=True):
        out.append(f'<li class="{verdict.verdict}">{escape(line)}</li>')
    out += [f'<li class="left-out">{escape(line)}</li>' for line in render.left_out_lines(report)]
    out += ["</ul>", "<h2>Run</h2>", "<dl>"]
    for label, value in render.header_lines(report):
        term = f"<dt>{escape(label)}</dt>" if label else ""  # a model's probe lines have no label of their own
        out.append(f"{term}<dd><code>{escape(value.strip())}</code></dd>")
    out += ["</dl>", '<table class="matrix"><thead><tr><th>property</th>']
    out += [f"<th>{escape(t.heading(m))}</th>" for m in t.models]
    out.append("</tr></thead><tbody>")
    for p in t.properties:
        row = "".join(_td(t, p, m) for m in t.models)
        out.append(f"<tr><th><code>{escape(p)}</code></th>{row}</tr>")
    out.append("</tbody></table>")
    if t.notes:
        out.append("<h2>Notes</h2><ol>")
    for n, (results, note) in enumerate(t.notes, 1):
        heading = f"<strong>{escape(t.note_heading(n))}</strong> ({escape(results[0].outcome)})"
        out.append(f'<li id="note-{n}"><p>{heading}</p>')
        out.append(f"<pre>{escape(note)}</pre>")
        for result in results:
            if result.outcome in ("fail", "error") and result.stage_errors:
                # As an image, not inline: each plot is its own document (its ids cannot meet another's).
                inline = base64.b64encode(svg(result).encode()).decode("ascii")
                alt = f"error per stage: {result.property} / {result.model}"
                out.append(f'<img src="data:image/svg+xml;base64,{inline}" alt="{escape(alt)}">')
        out.append("</li>")
    if t.notes:
        out.append("</ol>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
