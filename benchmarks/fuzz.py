"""Fuzz the file readers for a given time per format and record what was tried and seen.

    python benchmarks/fuzz.py --seconds 60             # each format for a minute; print a Markdown section
    python benchmarks/fuzz.py --seconds 520 --write    # an hour in all, into benchmarks/RESULTS.md

The inputs are tests/fuzz's (valid seeds of every format, mutated; see tests/fuzz/mutations.py), run by
its limited worker process (tests/fuzz/runner.py), one worker at a time, a fresh one per format. Per
format: the inputs tried, inputs per second, what the model reader did (returned a validated config
and weights, or refused with a one-line CheckpointError; `read_tokenizer` for tokenizer.bin), the
violations of the invariant (each input saved, its folder printed), and the worker's peak RSS.
Unlike the test (tests/fuzz/test_readers.py), a violation does not stop the run. Run from the project root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks._machine import describe
from benchmarks.results_file import write_section
from tests.fuzz.mutations import FuzzInput, fuzz_inputs
from tests.fuzz.runner import MEMORY_CONSTANT, MEMORY_PER_BYTE, TIME_LIMIT, Runner
from tests.fuzz.seeds import seeds

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Fuzzing the readers"


class _TimeUp(BaseException):
    """Ends Hypothesis's run when the time is up (a BaseException: Hypothesis neither catches nor shrinks it)."""


@dataclass
class Tally:
    format: str
    seconds: float = 0.0
    inputs: int = 0
    returned: int = 0
    refused: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    saved: list[str] = field(default_factory=list)
    peak_rss_kib: int = 0
    restarts: int = 0


def _kind(violation: str) -> str:
    """A violation without its input's folder names, for counting alike ones together."""
    return re.sub(r"/tmp/verifier-fuzz-\w+", "<folder>", violation)[:160]


def fuzz(fmt: str, seconds: float, hypothesis_seed: int) -> Tally:
    """Fuzz format `fmt` for `seconds`."""
    tally = Tally(fmt)
    main_reader = "read_tokenizer" if fmt == "tokenizer.bin" else "load_checkpoint"
    with Runner() as runner:
        start = time.monotonic()

        @seed(hypothesis_seed)
        @settings(
            max_examples=10**9, database=None, phases=[Phase.generate], deadline=None,
            suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
        )  # fmt: skip
        @given(fuzz_inputs(seeds()[fmt]))
        def one(case: FuzzInput) -> None:
            if time.monotonic() - start > seconds:
                raise _TimeUp
            result = runner.check(case)
            tally.inputs += 1
            if result.violations:
                tally.violations.update(_kind(v) for v in result.violations[:-1])  # the last says where it is saved
                tally.saved.append(result.violations[-1])
            elif result.outcomes.get(main_reader) == "returned":
                tally.returned += 1
            else:
                tally.refused += 1

        with contextlib.suppress(_TimeUp):
            one()
        tally.seconds = time.monotonic() - start
        tally.peak_rss_kib, tally.restarts = runner.peak_rss_kib, runner.restarts
    return tally


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def section(tallies: list[Tally], command: str, hypothesis_seed: int, started: str) -> str:
    total_seconds = sum(t.seconds for t in tallies)
    total_inputs = sum(t.inputs for t in tallies)
    lines = [
        SECTION,
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}` at commit {_commit()} (started {started} UTC, Hypothesis seed {hypothesis_seed}; "
        f"one worker process, nice {os.nice(0)}).  ",
        f"Limits per input (all six readers): {TIME_LIMIT:.0f} s; address space {MEMORY_CONSTANT // 2**20} MiB + "
        f"{MEMORY_PER_BYTE} x the input's bytes above the worker's own.  ",
        f"In all: {total_inputs:,} inputs in {total_seconds / 60:.1f} min, "
        f"{sum(len(t.saved) for t in tallies):,} of them broke the invariant "
        f"({sum(sum(t.violations.values()) for t in tallies):,} reader outcomes).",
        "",
        "| format | minutes | inputs | inputs/s | returned | CheckpointError | violations | worker peak RSS | "
        "worker restarts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in tallies:
        lines.append(
            f"| {t.format} | {t.seconds / 60:.1f} | {t.inputs:,} | {t.inputs / max(t.seconds, 1e-9):.1f} | "
            f"{t.returned:,} | {t.refused:,} | {len(t.saved):,} | {t.peak_rss_kib / 1024:.0f} MiB | {t.restarts} |"
        )
    kinds = Counter[str]()
    for t in tallies:
        kinds.update({f"{t.format}: {kind}": n for kind, n in t.violations.items()})
    if kinds:
        lines += ["", "Violations (format: reader: what happened; inputs):", ""]
        lines += [f"- `{kind}`: {n}" for kind, n in kinds.most_common()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per format (default 60)")
    parser.add_argument("--formats", nargs="+", default=None, help="formats to fuzz (default: all)")
    parser.add_argument("--seed", type=int, default=25, help="Hypothesis seed (default 25)")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    tallies = []
    for fmt in args.formats or list(seeds()):
        tally = fuzz(fmt, args.seconds, args.seed)
        tallies.append(tally)
        print(
            f"{fmt}: {tally.inputs:,} inputs in {tally.seconds:.0f} s, {tally.returned:,} returned, "
            f"{tally.refused:,} refused, {len(tally.saved)} violations",
            *tally.saved, sep="\n  ", file=sys.stderr, flush=True,
        )  # fmt: skip
    command = "python benchmarks/fuzz.py " + " ".join(sys.argv[1:])
    text = section(tallies, command, args.seed, started)
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
