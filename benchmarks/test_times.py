"""How long the test runs take: the README's default run and the slow set, measured, never asserted.

    python benchmarks/test_times.py            # time both runs and print a Markdown section
    python benchmarks/test_times.py --write    # ... and put it into benchmarks/RESULTS.md

The thorough profile's time is measured by `benchmarks/thorough_profile.py` (its own section).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402

RUNS = {
    "default run (the README's test command)": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"],
    "default run in one process": ["-m", "pytest", "-q", "-p", "no:cacheprovider"],
    "slow tests (`.ci/run`'s second step)": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow", "-n", "2"],
}


def timed_run(args: list[str]) -> tuple[float, str]:
    """Wall time of `python <args>` from the repository root, and pytest's summary line."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"exit {done.returncode}"
    return wall, re.sub(r"=+", "", summary).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    parser.add_argument("--default-only", action="store_true", help="time the default run only (not the slow tests)")
    args = parser.parse_args()
    runs = {name: a for name, a in RUNS.items() if not (args.default_only and "slow" in a)}  # "-m slow"
    lines = [
        "## Test run times",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/test_times.py --write` ({time.strftime('%Y-%m-%d')}); run cache warm "
        "(llama2.c's run.c already built).",
        "",
        "| run | command | wall time | pytest's summary |",
        "|---|---|---:|---|",
    ]
    for name, run_args in runs.items():
        wall, summary = timed_run(run_args)
        lines.append(f"| {name} | `python {' '.join(run_args)}` | {wall / 60:.1f} min | {summary} |")
        print(lines[-1], file=sys.stderr, flush=True)
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
