"""`verifier matrix`: the property suite on models x families, one cell at a time, resumable.

Each cell is `verifier check --model MODEL@FAMILY` in its own process, its reports in
`OUT/cells/MODEL@FAMILY/`; a cell whose report is there from an earlier run with the same Hypothesis
profile is kept, so a stopped matrix continues where it stopped (`--fresh` runs every cell again).
Cells run `--jobs` at a time; arguments after `--` go to every cell's pytest (`-- -n 2` runs each
cell's properties on pytest-xdist workers). A line per finished cell shows the progress; at the end
`OUT/matrix.json`, `matrix.md` and `matrix.html` hold every cell (`verifier.report.matrix`), each with
`verifier kl`'s next-token distribution statistics on the bundled text beside its verdict.

Models default to every built-in model (the engines and their precision classes); a model that
cannot run here (a package not installed) gets cells that say so, never "conforms". Exit status 0
when every cell conforms (or deviates only as its model declares), 1 otherwise, 2 for a usage error,
130 when stopped by Ctrl-C (the cells that finished are kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from verifier.cli import arguments
from verifier.fixtures import plugin
from verifier.model.config import FAMILIES
from verifier.plugin.registry import PluginError, load_spec, registered
from verifier.properties import profiles
from verifier.report.matrix import HTML, JSON, MARKDOWN, Cell, Matrix, cell_spec
from verifier.report.output import write_atomic
from verifier.report.results import Report

CELLS = "cells"
_TIME = "seconds.txt"  # beside a cell's reports: how long its run took
DISTRIBUTION = "distribution.json"  # beside them: `verifier kl`'s row for the cell


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "matrix",
        help="run the property suite on models x families and write the matrix",
        description="Run the property suite on every model x family (one `verifier check --model MODEL@FAMILY` a "
        "cell) and write the verdicts as matrix.json, matrix.md and matrix.html. Resumable: cells already run "
        "with the same profile are kept.",
        epilog="Arguments after `--` go to every cell's pytest, e.g. `verifier matrix -- -n 2`.",
    )
    p.add_argument(
        "--model", action="append", default=[], metavar="SPEC",
        help="a model (registered name or module.path:factory); repeatable (default: every built-in model)",
    )  # fmt: skip
    p.add_argument(
        "--families", type=arguments.families, default=list(FAMILIES), metavar="gpt2,llama,...",
        help=f"the families, comma-separated (default: all of {', '.join(FAMILIES)})",
    )  # fmt: skip
    p.add_argument(
        "--hypothesis-profile", choices=profiles.PROFILES, default=profiles.DEFAULT_PROFILE,
        help="the Hypothesis profile of every cell (default ci)",
    )  # fmt: skip
    p.add_argument("--jobs", type=_positive, default=1, metavar="N", help="cells run at a time (default 1)")
    p.add_argument("--out", type=arguments.nonempty, default="matrix", metavar="DIR", help="default: matrix")
    p.add_argument("--fresh", action="store_true", help="run every cell again, not only those without a report")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed to every cell's pytest")
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return int(text)


def default_models() -> list[str]:
    """Every built-in model, those run by default and those run by name (precision classes, engines)."""
    plugin.import_fixture_modules()
    return [spec.name for spec in registered() if spec.origin.startswith("built-in")]


def run(args: argparse.Namespace) -> int:
    plugin.import_fixture_modules()  # the registered names
    arguments.import_from_the_current_directory()  # the user's module.path:factory specs
    models = list(dict.fromkeys(args.model)) or default_models()
    for model in models:
        if "@" in model:
            raise PluginError(f"--model {model!r}: the matrix chooses the family of each cell; name the model alone")
        load_spec(model)  # a spec naming nothing is a usage error now, not a column of failed cells
    out = Path(args.out)
    todo = [(m, f) for m in models for f in args.families]
    kept = {} if args.fresh else {cell: c for cell in todo if (c := _finished(out, *cell, args.hypothesis_profile))}
    print(
        f"verifier matrix: {len(todo)} cells ({len(models)} models x {len(args.families)} families), "
        f"{len(kept)} kept from an earlier run, profile {args.hypothesis_profile}; reports in {out / CELLS}",
        flush=True,
    )
    cells = dict(kept)
    remaining = [cell for cell in todo if cell not in kept]
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            runs = [(cell, pool.submit(_run_cell, out, *cell, args.hypothesis_profile, args.pytest_args))
                    for cell in remaining]  # fmt: skip
            for done, (cell, future) in enumerate(runs, len(kept) + 1):
                cells[cell] = result = future.result()
                line = f"[{done}/{len(todo)}] {cell_spec(*cell)}: {result.summary()} ({result.seconds:.0f} s)"
                print(line, flush=True)
    finally:  # what finished is written, also when Ctrl-C stops the rest
        matrix = _write(out, models, args.families, args.hypothesis_profile, [cells[c] for c in todo if c in cells])
    counts = ", ".join(f"{n} {v}" for v, n in sorted(matrix.counts().items()))
    print(f"{counts}; written: {out / JSON}, {out / MARKDOWN}, {out / HTML}")
    return 0 if matrix.accepted else 1


def _cell_dir(out: Path, model: str, family: str) -> Path:
    return out / CELLS / cell_spec(model, family).replace("/", "_").replace(":", "_")


def _finished(out: Path, model: str, family: str, profile: str) -> Cell | None:
    """The cell as an earlier run left it, if it finished with this profile."""
    directory = _cell_dir(out, model, family)
    path = directory / "conformance.json"
    if not path.exists():
        return None
    report = Report.read(path)
    if report.header.hypothesis_profile != profile or report.stopped:
        return None
    seconds = float((directory / _TIME).read_text()) if (directory / _TIME).exists() else 0.0
    cell = Cell.from_report(model, family, report, seconds)
    cell.distribution = _distribution(directory, model, family)
    return cell


def _run_cell(out: Path, model: str, family: str, profile: str, pytest_args: list[str]) -> Cell:
    directory = _cell_dir(out, model, family)
    command = [
        sys.executable, "-m", "verifier", "check", "--model", cell_spec(model, family), "--reports", str(directory),
        "--hypothesis-profile", profile, "--", *pytest_args,
    ]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = round(time.monotonic() - start, 1)  # as seconds.txt keeps it: a kept cell reads the same
    path = directory / "conformance.json"
    if not path.exists():  # pytest could not start: the cell says why, in the check's own words
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return Cell(model, family, "untested", f"the check did not run: {why}", seconds=seconds)
    write_atomic(directory / _TIME, f"{seconds}\n".encode())
    cell = Cell.from_report(model, family, Report.read(path), seconds)
    cell.distribution = _distribution(directory, model, family)
    return cell


def _distribution(directory: Path, model: str, family: str) -> dict[str, Any]:
    """`verifier kl`'s row for the cell (kept from an earlier run), or why there is none."""
    path = directory / DISTRIBUTION
    if not path.exists():
        command = [sys.executable, "-m", "verifier", "kl", "--model", model, "--families", family, "--json", str(path)]
        done = subprocess.run(command, capture_output=True, text=True)
        if not path.exists():
            return {"unsupported": f"verifier kl failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"}
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    return rows[0] if rows else {}


def _write(out: Path, models: list[str], families: list[str], profile: str, cells: list[Cell]) -> Matrix:
    versions: dict[str, str] = {}
    for cell in cells:
        path = _cell_dir(out, cell.model, cell.family) / "conformance.json"
        if path.exists():
            versions.update(Report.read(path).header.versions)
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    matrix = Matrix(profile, created, versions, models, families, cells)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in ((JSON, matrix.to_json()), (MARKDOWN, matrix.markdown()), (HTML, matrix.html())):
        write_atomic(out / name, text.encode())
    return matrix
