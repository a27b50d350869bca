"""How long the test runs take: the README's default run and the slow set, measured, never asserted,
and where the time goes: pytest's durations of every test summed per test file and per property
(a property's tests over every model and family), the largest of each listed.

    python benchmarks/test_times.py            # time the runs and print a Markdown section
    python benchmarks/test_times.py --write    # ... and put it into benchmarks/RESULTS.md
    python benchmarks/test_times.py --junit .ci/out/slow.xml   # where a finished run's time went
    python benchmarks/test_times.py --runs default --before REV  # the README's run, and at git revision REV

`.ci/run` writes its slow tier's JUnit XML there and prints that breakdown at the end of every CI log.

The thorough profile's time is measured by `benchmarks/thorough_profile.py` (its own section).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe, worktree  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402

# (key for --runs, what the run is, its arguments)
RUNS = (
    (
        "default",
        "default run (the README's test command)",
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"],
    ),
    ("one-process", "default run in one process", ["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
    (
        "slow",
        "slow tests (`.ci/run`'s second step)",
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow", "-n", "2"],
    ),
)


LISTED = 12  # the largest files and properties shown per run
_DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown) +(\S+)", re.MULTILINE)


def timed_run(args: list[str], tree: Path = ROOT) -> tuple[float, str, str]:
    """Wall time of `python <args>` (with every test's duration reported) from the root of `tree` (this
    checkout, or a worktree of another revision, imported ahead of this one), pytest's summary line,
    and its output."""
    start = time.perf_counter()
    command = [sys.executable, *args, "--durations=0", "--durations-min=0"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"exit {done.returncode}"
    return wall, re.sub(r"=+", "", summary).strip(), done.stdout


def where_time_goes(output: str) -> tuple[Counter[str], Counter[str]]:
    """Seconds of setup, call and teardown summed per test file and per property (a test of
    properties/, over all its parameters)."""
    files: Counter[str] = Counter()
    properties: Counter[str] = Counter()
    for seconds, node in _DURATION.findall(output):
        path, _, test = node.partition("::")
        files[path] += float(seconds)
        if path.startswith("properties/"):
            properties[test.split("[")[0]] += float(seconds)
    return files, properties


def junit_times(xml: str) -> tuple[Counter[str], Counter[str]]:
    """`where_time_goes` from pytest's JUnit XML (`--junitxml`): each test case's time per file and per
    property. A case's classname is its module's dotted path (`tests.meta.test_mutants`)."""
    files: Counter[str] = Counter()
    properties: Counter[str] = Counter()
    for case in ET.fromstring(xml).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        seconds = float(case.get("time") or 0)
        files[path] += seconds
        if path.startswith("properties/"):
            properties[case.get("name", "").split("[")[0]] += seconds
    return files, properties


def breakdown(name: str, files: Counter[str], properties: Counter[str]) -> list[str]:
    """Markdown: the largest files and properties of a run."""
    return [
        "",
        f"Where the time of the {name} goes: {sum(files.values()):.0f} s of setup, call and teardown summed "
        f"over {len(files)} files (with workers, more than the wall time).",
        *_largest("test file", files),
        *(_largest("property", properties) if properties else []),
    ]


def _largest(title: str, totals: Counter[str]) -> list[str]:
    whole = sum(totals.values())
    lines = ["", f"| {title} | seconds | share |", "|---|---:|---:|"]
    return lines + [f"| {name} | {sec:.1f} | {sec / whole:.0%} |" for name, sec in totals.most_common(LISTED)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    keys = [key for key, _, _ in RUNS]
    parser.add_argument("--runs", nargs="+", choices=keys, default=keys, help="the runs timed (default: all)")
    parser.add_argument("--default-only", action="store_true", help="the default runs only: --runs default one-process")
    parser.add_argument("--junit", metavar="XML", help="print where a finished run's time went, from its --junitxml")
    parser.add_argument("--before", metavar="REV", help="also time each run at git revision REV, before this checkout")
    args = parser.parse_args()
    if args.junit:
        print("\n".join(breakdown(f"run of {args.junit}", *junit_times(Path(args.junit).read_text()))))
        return
    chosen = ["default", "one-process"] if args.default_only else args.runs
    runs = {name: run_args for key, name, run_args in RUNS if key in chosen}
    lines = [
        "## Test run times",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/test_times.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}); "
        "run cache warm (llama2.c's run.c already built).",
        "",
        "| run | command | wall time | pytest's summary |",
        "|---|---|---:|---|",
    ]
    breakdowns = []
    with contextlib.ExitStack() as stack:
        trees = {"": ROOT}
        if args.before:
            trees = {f"{args.before}: ": stack.enter_context(worktree(args.before, installed=True)), **trees}
        for name, run_args in runs.items():
            for code, tree in trees.items():  # the revision before this checkout, run by run
                wall, summary, output = timed_run(run_args, tree)
                lines.append(f"| {code}{name} | `python {' '.join(run_args)}` | {wall / 60:.1f} min | {summary} |")
                print(lines[-1], file=sys.stderr, flush=True)
                breakdowns += breakdown(f"{code}{name}", *where_time_goes(output))
    lines += breakdowns
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
