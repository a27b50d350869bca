"""Run the property suite in the `thorough` Hypothesis profile and write, per property and model,
the examples run, the time and the worst error / tolerance ratio into benchmarks/RESULTS.md
(section "Property suite, thorough profile"; the other sections of the file are kept).

    python benchmarks/thorough_profile.py                      # the full run (>= 1,000 examples each)
    python benchmarks/thorough_profile.py --max-examples 30 -- -k agreement   # reduced, to try it

Arguments after `--` go to pytest (e.g. `--model numpy`, `-k rope`). Run from the project root.
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


class Collector:
    """A pytest plugin that keeps one Row per test item."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self.rows.setdefault(report.nodeid, Row(report.nodeid))
        row.seconds += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            row.outcome = report.outcome
            ratios = [v for k, v in report.user_properties if k == "worst_error_ratio"]
            row.worst_ratio = ratios[0] if ratios else None

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
        "Worst ratio: max over the examples of max |error| / tolerance bound (`verifier/analysis/tolerance.py`);",
        "at most 1 passes.",
        "",
        "| property [model] | outcome | examples | time (s) | worst error / tolerance |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        name = r.test.split("::", 1)[-1]
        examples = "-" if r.examples is None else str(r.examples)
        ratio = "-" if r.worst_ratio is None else f"{r.worst_ratio:.3g}"
        lines.append(f"| `{name}` | {r.outcome} | {examples} | {r.seconds:.1f} | {ratio} |")
    return "\n".join(lines) + "\n"


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
    pytest_args = ["properties", "-p", "no:cacheprovider", "-q", "-m", "slow or not slow",
                   "--hypothesis-profile", profile, *args.pytest_args]  # fmt: skip
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
