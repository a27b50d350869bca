"""The engine matrix: models (engines at their precision classes) x families, one `verifier check` run
per cell (`MODEL@FAMILY`), each cell's verdict read back from its report and written together as
`matrix.json`, `matrix.md` and a self-contained `matrix.html`.

A cell says what a user needs to choose an engine: the verdict, the worst error of any property
against its bound (1.0 is the bound), the first divergent stage of its first failure, and the case
and command to reproduce that failure; an untested cell says why (a family the engine does not run,
a package not installed). `verifier.cli.matrix_cmd` runs the cells.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from verifier.report.results import FAILING, Report

JSON, MARKDOWN, HTML = "matrix.json", "matrix.md", "matrix.html"
DISTRIBUTION_NOTE = (
    "`verifier kl` per cell: the text tokenized by the family's real tokenizer, run through the model and the "
    "float64 oracle on the family's probe config in the model's declared shape (a block-quantized file's rows "
    "fill its blocks: 32 wide, or 256 for llama.cpp's K types, whose wider products make the distributions "
    "more peaked) with seeded weights (scale 0.3): how the model's precision moves the distributions, not how "
    "a trained model's would move (`verifier kl --checkpoint` measures that). The last column is the same "
    "statistics of the model's declared class alone (the reference run at it), where it is narrower than float32."
)


def cell_spec(model: str, family: str) -> str:
    """The `--model` spec a cell runs: the model on that family only."""
    return f"{model}@{family}"


@dataclass
class Cell:
    """One model on one family: its verdict and what a reader needs to act on it."""

    model: str
    family: str
    verdict: str  # conforms, fails or untested
    reason: str = ""  # why untested, or which families' kinds it refused
    precision: str = "float32"
    worst_ratio: float | None = None  # the largest error / tolerance of any property (the bound is 1)
    properties_run: int = 0
    examples: int = 0
    failed: list[str] = field(default_factory=list)  # the failing properties, each "property: ratio at stage"
    first_divergent_stage: str = ""  # of the first failure that localised one
    failure: str = ""  # the first failure's message, first line
    case: str = ""  # the first failure's case (`config = ...` lines)
    seconds: float = 0.0
    distribution: dict[str, Any] = field(default_factory=dict)  # `verifier kl` on the bundled text: its row

    @classmethod
    def from_report(cls, model: str, family: str, report: Report, seconds: float) -> Cell:
        spec = cell_spec(model, family)
        verdict = next(v for v in report.verdicts() if v.model == spec)
        mine = [r for r in report.results if r.model == spec]
        ratios = [r.worst_error_ratio for r in mine if r.worst_error_ratio is not None]
        failures = [r for r in mine if r.outcome in FAILING]
        first = failures[0] if failures else None
        return cls(
            model, family, verdict.verdict, verdict.reason, verdict.precision,
            max(ratios) if ratios else None, verdict.run, verdict.examples,
            [_failed(r.property, r.worst_error_ratio, r.first_divergent_stage) for r in failures],
            next((r.first_divergent_stage for r in failures if r.first_divergent_stage), ""),
            first.detail.splitlines()[0] if first and first.detail else "", first.case if first else "", seconds,
        )  # fmt: skip

    @property
    def reproduce(self) -> str:
        """The command that runs this cell alone."""
        return f"verifier check --model {cell_spec(self.model, self.family)}"

    def summary(self) -> str:
        """The cell's text in a table: `conforms 0.12`, `FAILS 3.4 at layers.0.attn_out`, `untested`."""
        ratio = "" if self.worst_ratio is None else f" {self.worst_ratio:.3g}"
        if self.verdict == "fails":
            stage = f" at {self.first_divergent_stage}" if self.first_divergent_stage else ""
            return f"FAILS{ratio}{stage}"
        return f"{self.verdict}{ratio}" if self.verdict in ("conforms", "deviates") else self.verdict


@dataclass
class Matrix:
    """The cells of one matrix run, with how it was run and the versions it ran with."""

    profile: str
    created: str
    versions: dict[str, str]
    models: list[str]
    families: list[str]
    cells: list[Cell] = field(default_factory=list)

    def cell(self, model: str, family: str) -> Cell | None:
        return next((c for c in self.cells if c.model == model and c.family == family), None)

    @property
    def accepted(self) -> bool:
        """Every cell ran and conforms, or deviates only as its model declared."""
        return len(self.cells) == len(self.models) * len(self.families) and all(
            c.verdict in ("conforms", "deviates") for c in self.cells
        )

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for c in self.cells:
            found[c.verdict] = found.get(c.verdict, 0) + 1
        return found

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def read(cls, path: Path) -> Matrix:
        data: dict[str, Any] = json.loads(path.read_text())
        cells = [Cell(**c) for c in data.pop("cells")]
        return cls(**data, cells=cells)

    def markdown(self) -> str:
        counts = ", ".join(f"{n} {v}" for v, n in sorted(self.counts().items()))
        lines = [
            "# Engine matrix",
            "",
            f"{self.created}, Hypothesis profile `{self.profile}`; {counts}. A cell is the verdict and the worst "
            "error / tolerance of any property (the bound is 1), and for a failure its first divergent stage.",
            "",
            "| model | " + " | ".join(self.families) + " |",
            "|---|" + "---|" * len(self.families),
        ]
        for model in self.models:
            cells = [self.cell(model, f) for f in self.families]
            lines.append(f"| {model} | " + " | ".join(c.summary() if c else "not run" for c in cells) + " |")
        lines += ["", "## Next-token distributions on the bundled text", "", DISTRIBUTION_NOTE, "", *DISTRIBUTION_HEAD]
        lines += [row for c in self.cells if (row := _distribution_row(c))]
        lines += ["", "## What is not `conforms`", ""]
        for c in self.cells:
            if c.verdict != "conforms":
                lines.append(f"- **{c.model} on {c.family}**: {c.verdict}; {_why(c)} (`{c.reproduce}`)")
        lines += ["", "## Versions", "", *(f"- {name} {v}" for name, v in sorted(self.versions.items())), ""]
        return "\n".join(lines)

    def html(self) -> str:
        head = "".join(f"<th>{escape(f)}</th>" for f in self.families)
        rows = []
        for model in self.models:
            tds = []
            for family in self.families:
                c = self.cell(model, family)
                text = c.summary() if c else "not run"
                title = escape(_why(c) if c and c.verdict != "conforms" else "", quote=True)
                tds.append(f'<td class="{c.verdict if c else "none"}" title="{title}">{escape(text)}</td>')
            rows.append(f"<tr><th>{escape(model)}</th>{''.join(tds)}</tr>")
        notes = [
            f"<li><b>{escape(c.model)} on {escape(c.family)}</b>: {escape(c.verdict)}; {escape(_why(c))}"
            f"<br><code>{escape(c.reproduce)}</code>" + (f"<pre>{escape(c.case)}</pre>" if c.case else "") + "</li>"
            for c in self.cells
            if c.verdict != "conforms"
        ]
        versions = "".join(f"<li>{escape(n)} {escape(v)}</li>" for n, v in sorted(self.versions.items()))
        dist_head = "".join(f"<th>{escape(h.strip())}</th>" for h in DISTRIBUTION_HEAD[0].strip("|").split("|"))
        dist_rows = "".join(
            "<tr>" + "".join(f"<td>{escape(x.strip())}</td>" for x in row.strip("|").split("|")) + "</tr>"
            for c in self.cells
            if (row := _distribution_row(c))
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>Engine matrix</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
            "th,td{border:1px solid #bbb;padding:.3em .6em}td{font-family:monospace;white-space:nowrap}"
            "td.conforms{background:#d4f4d4}td.fails{background:#f8c8c8;font-weight:bold}"
            "td.deviates{background:#f4e4c8}td.untested{background:#f4f0c8}pre{background:#f6f6f6;padding:.5em}</style></head><body>"
            f"<h1>Engine matrix</h1><p>{escape(self.created)}, Hypothesis profile <code>{escape(self.profile)}"
            "</code>. A cell: the verdict and the worst error / tolerance of any property (the bound is 1).</p>"
            f"<table><tr><th>model</th>{head}</tr>{''.join(rows)}</table>"
            f"<h2>Next-token distributions on the bundled text</h2><p>{escape(DISTRIBUTION_NOTE)}</p>"
            f"<table><tr>{dist_head}</tr>{dist_rows}</table>"
            f"<h2>What is not conforms</h2><ul>{''.join(notes)}</ul><h2>Versions</h2><ul>{versions}</ul>"
            "</body></html>\n"
        )


DISTRIBUTION_HEAD = (
    "| cell | mean KL | 99% KL | max KL | same top token | RMS Delta p | its class alone: mean KL, same top |",
    "|---|---|---|---|---|---|---|",
)


def _distribution_row(c: Cell) -> str:
    """The cell's row of the distribution table, or "" where `verifier kl` was not run on it."""
    d, name = c.distribution, cell_spec(c.model, c.family)
    if "mean_kl" not in d:
        why = d.get("unsupported") or (f"raised on the text: {d['error']}" if "error" in d else "not measured")
        return f"| {name} | {why} | | | | | |" if d else ""
    kl = f"{d['mean_kl']:.3g} | {d['p99_kl']:.3g} | {d['max_kl']:.3g}"
    own = f"{d['class_mean_kl']:.3g}, {100 * d['class_same_top']:.1f}%" if "class_mean_kl" in d else ""
    return f"| {name} | {kl} | {100 * d['same_top']:.1f}% | {100 * d['rms_dp']:.3g}% | {own} |"


def _failed(name: str, ratio: float | None, stage: str | None) -> str:
    """`test_logits_agree_with_the_oracle: 5.9x at layers.0.mlp_act`: a failing property, how far, where."""
    short = name.rpartition("::")[2]
    return short + (f": {ratio:.3g}x" if ratio is not None else "") + (f" at {stage}" if stage else "")


def _why(c: Cell) -> str:
    """A non-conforming cell's explanation: the reason it is untested, or its failures."""
    if c.verdict != "fails":
        return c.reason or "no property ran on it"
    where = f", first divergent stage {c.first_divergent_stage}" if c.first_divergent_stage else ""
    worst = f", worst {c.worst_ratio:.3g}x the bound" if c.worst_ratio is not None else ""
    return f"{len(c.failed)} of {c.properties_run} properties failed ({', '.join(c.failed)}){worst}{where}: {c.failure}"
