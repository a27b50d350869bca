"""Run the property suite in the `thorough` Hypothesis profile and write, per property and model,
the examples run, the time and the worst error / tolerance ratio into benchmarks/RESULTS.md
(section "Property suite, thorough profile"; the other sections of the file are kept).

    python benchmarks/thorough_profile.py                      # the full run (>= 1,000 examples each)
    python benchmarks/thorough_profile.py --max-examples 30 -- -k agreement   # reduced, to try it

By default every built-in model runs, those of the precision classes too (`fixtures/builtin.py`,
each judged at its class); `--model NAME` after `--` chooses. Arguments after `--` go to pytest
(e.g. `--model numpy`, `-k rope`, `-n 2`). Run from the project root.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.results_file import RESULTS, write_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Property suite, thorough profile"


@dataclass
class Row:
    test: str
    outcome: str = "not run"
    seconds: float = 0.0
    examples: int | None = None
    worst_ratio: float | None = None
    precision: str | None = None


class Collector:
    """A pytest plugin that keeps one Row per test item."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self.rows.setdefault(report.nodeid, Row(report.nodeid))
        row.seconds += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            row.outcome = report.outcome
            props = dict(report.user_properties)
            row.worst_ratio = props.get("worst_error_ratio")
            row.precision = props.get("precision")
            if row.examples is None and "examples" in props:  # under xdist: the suite's own count of cases run
                row.examples = int(props["examples"])

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # Hypothesis' pytest plugin leaves its statistics on the item: count the examples run.
        stats = getattr(item, "hypothesis_statistics", "")
        counts = re.findall(r"(\d+) passing, (\d+) failing", stats)
        if counts:
            self.rows.setdefault(item.nodeid, Row(item.nodeid)).examples = sum(int(p) + int(f) for p, f in counts)


def _table(rows: list[Row], command: str, profile: str, max_examples: int, wall: float) -> str:
    lines = [
        SECTION,
        "",
        f"Command: `{command}` (profile `{profile}`, max_examples {max_examples}); wall time {wall:.0f} s.",
        "Worst ratio: max over the examples of max |error| / tolerance bound, the bound of the model's precision",
        "class (`verifier/analysis/precision.py`); at most 1 passes. Examples: cases run (Hypothesis's count,",
        "or under xdist the suite's count of cases the model was built for).",
        "",
        "| property [model] | class | outcome | examples | time (s) | worst error / tolerance |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        name = r.test.split("::", 1)[-1]
        examples = "-" if r.examples is None else str(r.examples)
        ratio = "-" if r.worst_ratio is None else f"{r.worst_ratio:.3g}"
        lines.append(f"| `{name}` | {r.precision or '-'} | {r.outcome} | {examples} | {r.seconds:.1f} | {ratio} |")
    failed = [r for r in rows if r.outcome == "failed"]
    worst: dict[str, float] = {}
    for r in rows:
        if r.worst_ratio is not None and r.precision:
            name = r.precision.split(" ")[0]  # a q8_0 variant counts as q8_0
            worst[name] = max(worst.get(name, 0.0), r.worst_ratio)
    lines += ["", f"{len(failed)} failed. Worst error / tolerance per class: "
              + ", ".join(f"{p} {w:.3g}" for p, w in worst.items()) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _every_built_in() -> list[str]:
    """`--model NAME` for every built-in model, the precision classes' (run by name only) included."""
    from verifier.fixtures.plugin import import_fixture_modules
    from verifier.plugin import registry

    import_fixture_modules()
    return [f"--model={spec.name}" for spec in registry.registered() if spec.origin.startswith("built-in")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=None, help="a reduced run: fewer examples than thorough's")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file to update")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)

    os.chdir(ROOT)
    from verifier.properties.profiles import register_profiles

    register_profiles()
    profile = "thorough"
    if args.max_examples is not None:
        profile = "thorough-reduced"
        settings.register_profile(profile, parent=settings.get_profile("thorough"), max_examples=args.max_examples)
    max_examples = settings.get_profile(profile).max_examples
    models = [] if any(a.startswith("--model") for a in args.pytest_args) else _every_built_in()
    pytest_args = ["properties", "-p", "no:cacheprovider", "-q", "-m", "slow or not slow",
                   "--hypothesis-profile", profile, *models, *args.pytest_args]  # fmt: skip
    collector = Collector()
    start = time.perf_counter()
    status = pytest.main(pytest_args, plugins=[collector])
    wall = time.perf_counter() - start
    command = (
        "python benchmarks/thorough_profile.py"
        + (f" --max-examples {args.max_examples}" if args.max_examples is not None else "")
        + (" -- " + " ".join(args.pytest_args) if args.pytest_args else "")
    )
    rows: list[Any] = sorted(collector.rows.values(), key=lambda r: r.test)
    write_section(_table(rows, command, profile, max_examples, wall), args.results)
    print(f"wrote {SECTION!r} to {args.results}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
