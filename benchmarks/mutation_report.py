"""The mutation report: how fast and how precisely the property suite catches each catalog mutant,
as free code and as constrained real code runs it, and at every precision class.

    python benchmarks/mutation_report.py            # measure and print the Markdown sections
    python benchmarks/mutation_report.py --write    # ... and put them into benchmarks/RESULTS.md
    python benchmarks/mutation_report.py --classes float32 --only NoScale   # a part of it
    python benchmarks/mutation_report.py --only NoScale --first-failure     # each run stops at its first failure

For every mutant of `tests/meta/mutants/catalog.py` (and the correct implementation), the whole
suite runs in the `ci` profile through the public plug-in path (`verifier check --model ...`):
- killed by: the properties that fail;
- time to first failure: for each failing property, the time from its start to its first failing
  example (before shrinking); the mutant's figure is the fastest property's; "in suite order" is the
  time from the start of the whole run (properties in collection order) to its first failing example;
- first divergent stage: where a traced failure localized the bug;
- shrunk counterexample: the fastest property run again in the `ci-shrink` profile (generated
  examples only, then shrunk), and the size of the minimal case Hypothesis reports. "explicit only"
  means only a pinned `@example` reached the bug within the ci budget of generated examples.
- constrained: the whole suite again on the mutant as constrained real code runs it
  (`tests/meta/mutants/constrained.py`: published shapes only, one sequence at a time, the last
  position's logits only, where the bug allows): the properties that fail and the fastest one, or
  why the bug cannot show that way (`EXPLAINED` there).
Targets (issues 6 and 10): every mutant killed, in both columns (or explained); median time to first
failure <= 3 s, slowest <= 60 s.

At each other precision class (tf32, float16, bfloat16, q8_0), every mutant and the correct
implementation compute at that class (`tests.meta.mutants.catalog:at.<class>.<name>`: weights and
stage outputs rounded as the format rounds them) and declare it, so the suite judges them by the
class's bounds; killed, time to first failure and the fastest property are measured the same way
(without the shrinking and constrained runs). A mutant no property kills at a class is run once more
computed in float32 but judged at the class (`exact_at.<class>.<name>`): its worst error / bound over
the suite is the size of the bug's effect against the class's bounds. Below 1 the class cannot
resolve it: "undetectable at the class"; at or above 1 it is a hole the report names. The per-class
section is rewritten after each class, so a partial run keeps what it measured.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import describe  # noqa: E402
from benchmarks.results_file import read_section, write_section  # noqa: E402
from tests.meta.mutants.constrained import BATCH_BUGS, EXPLAINED  # noqa: E402
from tests.meta.suite_runs import (  # noqa: E402
    CONSTRAINED_CORRECT,
    DOCS,
    constrained_spec,
    effect_spec,
    mutant_spec,
    run_suite,
)
from verifier.report.results import Result  # noqa: E402

CLASSES = ("float32", "tf32", "float16", "bfloat16", "q8_0")
SECTION_CLASSES = "## Mutation report per precision class"


@dataclass
class MutantResult:
    name: str
    killers: list[str]
    first_failure: dict[str, float]
    stage: str | None
    in_suite_order: float | None  # seconds from the suite's start to its first failing example
    shrunk: str = ""
    effect: float | None = None  # not killed: worst error / bound of the float32 mutant at the class
    effect_killed: bool = False  # ... and whether that float32 run failed a property
    constrained: MutantResult | None = None  # float32: the same mutant as constrained code runs it

    @property
    def fastest(self) -> tuple[str, float] | None:
        timed = sorted(self.first_failure.items(), key=lambda item: item[1])
        return timed[0] if timed else None


# `--first-failure`: each suite run stops at its first failing property (pytest -x).
FIRST_FAILURE_ONLY: list[str] = []


def _run(name: str, model: str) -> MutantResult:
    with tempfile.TemporaryDirectory() as tmp:
        report = run_suite(model, Path(tmp), *FIRST_FAILURE_ONLY)
    failures = report.failures
    times = {r.property: r.first_failure_seconds for r in failures if r.first_failure_seconds is not None}
    stage = next((r.first_divergent_stage for r in failures if r.first_divergent_stage), None)
    return MutantResult(name, [r.property for r in failures], times, stage, _in_suite_order(report.results))


def measure(name: str, precision: str) -> MutantResult:
    """The mutant (or "correct") computing at `precision`; in float32 also shrunk and run as constrained code."""
    result = _run(name, mutant_spec(name, precision))
    if precision == "float32":
        if result.fastest is not None:
            result.shrunk = shrunk_case(mutant_spec(name), result.fastest[0])
        result.constrained = _run(name, CONSTRAINED_CORRECT if name == "correct" else constrained_spec(name))
    found = f"{len(result.killers)} properties, fastest {result.fastest}"
    if result.constrained is not None:
        found += f"; constrained: {result.constrained.fastest}"
    print(f"{name} at {precision}: {found}", file=sys.stderr, flush=True)
    return result


def measure_effect(result: MutantResult, precision: str) -> None:
    """For a mutant not killed at `precision`: the worst error / bound of the same bug computed in
    float32 and judged at the class, over every property."""
    with tempfile.TemporaryDirectory() as tmp:
        report = run_suite(effect_spec(result.name, precision), Path(tmp))
    ratios = [r.worst_error_ratio for r in report.results if r.worst_error_ratio is not None]
    result.effect = max(ratios, default=0.0)
    result.effect_killed = bool(report.failures)
    print(f"{result.name} at {precision}: effect {result.effect:.3g}x the bound", file=sys.stderr, flush=True)


def measure_class(
    precision: str, names: list[str], pool: ThreadPoolExecutor
) -> tuple[list[MutantResult], MutantResult]:
    """Every mutant in `names`, and the correct implementation, computing at `precision`."""
    results = list(pool.map(lambda name: measure(name, precision), names))
    correct = measure("correct", precision)
    if precision != "float32":
        list(pool.map(lambda r: measure_effect(r, precision), [r for r in results if not r.killers]))
    return results, correct


def _in_suite_order(results: list[Result]) -> float | None:
    """Seconds from the start of the run until the first failing example, tests run in order."""
    elapsed = 0.0
    for r in results:
        if r.outcome == "fail" and r.first_failure_seconds is not None:
            return elapsed + r.first_failure_seconds
        elapsed += r.duration
    return None


def shrunk_case(model: str, prop: str) -> str:
    """The size of the minimal failing case of property `prop` found by generation and shrinking."""
    test = prop.split("::")[-1]
    with tempfile.TemporaryDirectory() as tmp:
        report = run_suite(model, Path(tmp), "-k", test, profile="ci-shrink")
        text = (Path(tmp) / "junit.xml").read_text()
    if not report.failures:
        return "explicit only"
    configs = re.findall(r"config = ModelConfig\((.*?)\)", text)
    tokens = re.findall(r"tokens = np\.array\(\[(.*?)\]\)", text)
    if not configs or not tokens:
        return "shrunk (case not printed)"
    fields = dict(re.findall(r"(\w+)=([\w.'-]+)", configs[-1]))
    T = len([t for t in tokens[-1].split(",") if t.strip()])
    return f"{fields['family'].strip(chr(39))}, T={T}, {fields['n_layers']} layer(s), d_model={fields['d_model']}"


def _short(prop: str) -> str:
    module, _, test = prop.partition("::")
    return f"{module.removeprefix('test_').removesuffix('.py')}: {test.removeprefix('test_')}"


def _how_constrained(name: str) -> str:
    return "published, batched, last logits" if name in BATCH_BUGS else "published, unbatched, last logits"


def _constrained_cell(r: MutantResult) -> str:
    """The constrained run's fastest killer and its time, or why it cannot kill."""
    fastest = r.constrained.fastest if r.constrained else None
    if fastest is not None:
        return f"{_short(fastest[0])} ({fastest[1]:.2f})"
    return EXPLAINED.get(r.name, "NOT KILLED")


def _killers(r: MutantResult | None) -> str:
    return ", ".join(_short(p) for p in r.killers) or "none" if r else "-"


def render(results: list[MutantResult], correct: MutantResult, seconds: float) -> str:
    killed = [r for r in results if r.killers]
    constrained_killed = [r for r in results if r.constrained and r.constrained.killers]
    survivors = [r.name for r in results if r not in constrained_killed]
    unexplained = [name for name in survivors if name not in EXPLAINED]
    times = [r.fastest[1] for r in killed if r.fastest is not None]
    correct_failures = correct.killers + (correct.constrained.killers if correct.constrained else [])
    summary = (
        f"**{len(killed)} of {len(results)} mutants killed**; as constrained code runs them (published shapes only, "
        "one sequence at a time, the last position's logits only, where the bug allows: "
        f"`tests/meta/mutants/constrained.py`), **{len(constrained_killed)} of {len(results)} killed**"
    )
    if survivors:
        summary += f", {len(survivors) - len(unexplained)} explained in the table"
    if unexplained:
        summary += f" (NOT KILLED, unexplained: {', '.join(unexplained)})"
    summary += "; the correct implementation, in both forms, " + (
        "passes every property." if not correct_failures else f"FAILS {', '.join(correct_failures)}."
    )
    if times:
        summary += f" Time to first failure: median {statistics.median(times):.2f} s, slowest {max(times):.2f} s."
    lines = [
        "## Mutation report",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/mutation_report.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}), "
        f"{seconds / 60:.0f} min; Hypothesis profile `ci`.",
        "",
        summary,
        "",
        "| mutant | bug | properties failed | fastest property | first failure (s) | in suite order (s) "
        "| first divergent stage | shrunk counterexample | constrained run | constrained: properties failed "
        "| constrained: fastest property (s) |",
        "|---|---|---:|---|---:|---:|---|---|---|---:|---|",
    ]
    for r in results:
        fastest = r.fastest
        lines.append(
            f"| {r.name} | {DOCS[r.name]} | {len(r.killers)} | {_short(fastest[0]) if fastest else '-'} "
            f"| {f'{fastest[1]:.2f}' if fastest else '-'} "
            f"| {f'{r.in_suite_order:.2f}' if r.in_suite_order is not None else '-'} "
            f"| {r.stage or '-'} | {r.shrunk or '-'} | {_how_constrained(r.name)} "
            f"| {len(r.constrained.killers) if r.constrained else '-'} | {_constrained_cell(r)} |"
        )
    lines += ["", "<details><summary>Every property that failed, per mutant</summary>", ""]
    lines += [f"- {r.name}: {_killers(r)}; constrained: {_killers(r.constrained)}" for r in results]
    lines += ["", "</details>"]
    return "\n".join(lines)


def _cell(r: MutantResult) -> str:
    if r.fastest is not None:
        return f"{r.fastest[1]:.2f} s"
    if r.effect is None:
        return "SURVIVES"
    if r.effect_killed or r.effect > 1:
        return f"SURVIVES (effect {r.effect:.2g}x the bound)"
    return f"undetectable ({r.effect:.2g}x the bound)"


@dataclass
class Column:
    """One class's part of the per-class section: its summary row, its cell per mutant, its details line."""

    summary: str
    cells: dict[str, str]
    details: str


def _row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def earlier_columns(section: str) -> tuple[dict[str, Column], str]:
    """The classes of a per-class section as written (`render_classes`), and its command line."""
    lines = section.splitlines()
    summaries = {_row(line)[0]: line for line in lines if line.startswith("| ") and _row(line)[0] in CLASSES}
    header = next((_row(line)[1:] for line in lines if line.startswith("| mutant |")), [])
    cells: dict[str, dict[str, str]] = {p: {} for p in header}
    for line in lines:
        row = _row(line)
        if line.startswith("| ") and len(row) == len(header) + 1 and row[0] not in ("mutant", *CLASSES):
            for p, cell in zip(header, row[1:], strict=True):
                cells[p][row[0]] = cell
    details = {line[2:].partition(":")[0]: line for line in lines if line.startswith("- ")}
    command = next((line.partition("`")[2].partition("`")[0] for line in lines if line.startswith("Command:")), "")
    columns = {p: Column(summaries[p], cells[p], details.get(p, f"- {p}: ")) for p in header if p in summaries}
    return columns, command


def column(p: str, results: list[MutantResult], correct: MutantResult) -> Column:
    """A class's part of the per-class section, from this run's results."""
    killed = [r for r in results if r.killers]
    times = [r.fastest[1] for r in killed if r.fastest is not None]
    hidden = [r for r in results if not r.killers and _cell(r).startswith("undetectable")]
    timing = f"{statistics.median(times):.2f} / {max(times):.2f}" if times else "-"
    verdict = "passes every property" if not correct.killers else "FAILS " + ", ".join(map(_short, correct.killers))
    summary = (
        f"| {p} | {len(killed)} of {len(results)} | {len(hidden)} | {len(results) - len(killed) - len(hidden)} "
        f"| {timing} | {verdict} |"
    )
    fastest = [f"{r.name}: {_short(r.fastest[0])}" for r in results if r.fastest is not None]
    return Column(summary, {r.name: _cell(r) for r in results}, f"- {p}: " + "; ".join(fastest))


def render_classes(
    by_class: dict[str, tuple[list[MutantResult], MutantResult]],
    seconds: float,
    earlier: tuple[dict[str, Column], str] = ({}, ""),
) -> str:
    """The per-class table: for each mutant and class, the time to its first failure, or why it survives.
    The classes of `earlier` (`earlier_columns` of the section as it stands) that this run did not
    measure are kept as they were, and said to be; a class this run measured is this run's alone."""
    now = {p: column(p, *measured) for p, measured in by_class.items()}
    kept_columns, kept_command = earlier
    kept = {p: c for p, c in kept_columns.items() if p not in now}
    columns = {p: now.get(p) or kept[p] for p in CLASSES if p in now or p in kept}
    lines = [
        SECTION_CLASSES,
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/mutation_report.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}), "
        f"{seconds / 60:.0f} min for {', '.join(now)}; Hypothesis profile `ci`. Each mutant computes at the class "
        "(weights and stage outputs rounded as the format rounds them, `tests/meta/mutants/base.py`) and declares "
        "it. A cell is the time to the first failing example of the fastest property; a mutant no property kills "
        "is then run in float32 arithmetic judged by the class's bounds, and its worst error / bound over the suite "
        "is its effect: below 1, the class cannot resolve the bug (undetectable at the class).",
    ]
    if kept:
        lines += ["", f"Kept from earlier runs (the last: `{kept_command}`): {', '.join(kept)}."]
    lines += [
        "",
        "| class | killed | undetectable | survives | time to first failure, median / slowest (s) "
        "| correct implementation |",
        "|---|---:|---:|---:|---:|---|",
        *(c.summary for c in columns.values()),
    ]
    lines += ["", "| mutant | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    names = list(dict.fromkeys(name for c in columns.values() for name in c.cells))
    for name in names:
        lines.append(f"| {name} | " + " | ".join(c.cells.get(name, "-") for c in columns.values()) + " |")
    lines += ["", "<details><summary>The fastest property per mutant and class</summary>", ""]
    lines += [c.details for c in columns.values()]
    lines += ["", "</details>"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="update the sections in benchmarks/RESULTS.md")
    parser.add_argument("--only", nargs="*", metavar="MUTANT", help="measure only these mutants")
    parser.add_argument("--classes", default=",".join(CLASSES), help=f"comma-separated (default {','.join(CLASSES)})")
    parser.add_argument("--workers", type=int, default=2, help="mutants measured at once (default 2)")
    parser.add_argument(
        "--first-failure",
        action="store_true",
        help="stop each mutant's suite run at its first failing property (faster; 'properties failed' is then 1)",
    )
    args = parser.parse_args()
    if args.first_failure:
        FIRST_FAILURE_ONLY.append("-x")
    names = args.only or list(DOCS)
    classes = [c for c in args.classes.split(",") if c]
    unknown = sorted(set(classes) - set(CLASSES))
    if unknown:
        parser.error(f"unknown classes {unknown}; the classes are {', '.join(CLASSES)}")
    by_class: dict[str, tuple[list[MutantResult], MutantResult]] = {}
    earlier = earlier_columns(read_section(SECTION_CLASSES))
    start = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        for p in classes:
            class_start = time.perf_counter()
            by_class[p] = measure_class(p, names, pool)
            if p == "float32":
                results, correct = by_class[p]
                section = render(results, correct, time.perf_counter() - class_start)
                print(section)
                if args.write:
                    write_section(section)
            section = render_classes(by_class, time.perf_counter() - start, earlier)
            if args.write:
                write_section(section)
    print(section)


if __name__ == "__main__":
    main()
