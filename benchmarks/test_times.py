"""How long the test runs take: the README's default run and the slow set, measured, never asserted,
and where the time goes: pytest's durations of every test summed per test file and per property
(a property's tests over every model and family), the largest of each listed.

    python benchmarks/test_times.py            # time the runs and print a Markdown section
    python benchmarks/test_times.py --write    # ... and put it into benchmarks/RESULTS.md
    python benchmarks/test_times.py --junit .ci/out/slow.xml   # where a finished run's time went
    python benchmarks/test_times.py --runs default --before REV  # the README's run, and at git revision REV
    python benchmarks/test_times.py --runs default --processes     # ... and the CPU of each process it started

`.ci/run` writes its slow tier's JUnit XML there and prints that breakdown at the end of every CI log.

The thorough profile's time is measured by `benchmarks/thorough_profile.py` (its own section).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shlex
import subprocess
import sys
import threading
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


class ProcessSampler:
    """The CPU time (user + system) of every process descended from `root`, read from Linux's /proc
    every `interval` seconds while the run goes: each process's last reading, so a process's last
    `interval` and processes living less than that are missed (`processes` reports them as unattributed)."""

    def __init__(self, root: int, interval: float = 0.1) -> None:
        self.root, self.interval = root, interval
        self.seen: dict[int, tuple[int, str, float]] = {}  # pid: (parent pid, command line, CPU seconds)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self._done.wait(self.interval):
            stats = {}
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    fields = (entry / "stat").read_text().rpartition(")")[2].split()
                    stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
            children: dict[int, list[int]] = {}
            for pid, (parent, _) in stats.items():
                children.setdefault(parent, []).append(pid)
            family, todo = set(), [self.root]
            while todo:
                family.update(found := children.get(todo.pop(), []))
                todo += found
            for pid in family:
                if pid not in self.seen or self.seen[pid][0] != stats[pid][0]:
                    with contextlib.suppress(OSError):
                        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
                        self.seen[pid] = (stats[pid][0], shlex.join(a.decode(errors="replace") for a in argv if a), 0.0)
                if pid in self.seen:
                    self.seen[pid] = (*self.seen[pid][:2], stats[pid][1])

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def process_kind(command: str, parent: int, root: int) -> str:
    """What a process was, for grouping: an xdist worker, `verifier <subcommand>`, pytest under `verifier
    check`, another pytest, a Python module or script by name, or a program by name."""
    argv = shlex.split(command)
    if not argv:
        return "(exited before it was read)"
    if "python" not in Path(argv[0]).name:
        name = Path(argv[0]).name
        return f"verifier {argv[1]}" if name == "verifier" and len(argv) > 1 else name
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-c", "-m"):  # the interpreter's own options
        rest = rest[2:] if rest[0] in ("-W", "-X") else rest[1:]
    if rest[:1] == ["-c"]:
        return "an xdist worker" if parent == root else "python -c"
    if rest[:1] == ["-m"] and len(rest) > 1:
        module, rest = rest[1], rest[2:]
    else:
        module, rest = (Path(rest[0]).name if rest else "python"), rest[1:]
    if module == "verifier" and rest:
        return f"verifier {rest[0]}"
    if module == "pytest":
        return "pytest under verifier check" if "verifier.report.collect" in rest else "pytest (other)"
    return module


def processes(sampler: ProcessSampler, cpu: float) -> list[str]:
    """Markdown: the run's CPU time by kind of process, against the CPU of the whole run (`cpu`)."""
    kinds: dict[str, list[float]] = {}
    for parent, command, seconds in sampler.seen.values():
        kinds.setdefault(process_kind(command, parent, sampler.root), []).append(seconds)
    sampled = sum(sum(v) for v in kinds.values())
    lines = [
        "",
        f"Where the run's CPU goes, by process: {cpu:.0f} s of user and system time in all, {len(sampler.seen)} "
        f"processes seen (sampled from /proc every {sampler.interval} s; {max(cpu - sampled, 0):.0f} s unattributed: "
        "pytest's own process, and processes shorter than a sample).",
        "",
        "| process | runs | CPU seconds | share |",
        "|---|---:|---:|---:|",
    ]
    for kind, times in sorted(kinds.items(), key=lambda item: -sum(item[1]))[:LISTED]:
        lines.append(f"| {kind} | {len(times)} | {sum(times):.1f} | {sum(times) / cpu:.0%} |")
    return lines


def timed_run(args: list[str], tree: Path = ROOT, *, sample: bool = False) -> tuple[float, str, str, list[str]]:
    """Wall time of `python <args>` (with every test's duration reported) from the root of `tree` (this
    checkout, or a worktree of another revision, imported ahead of this one), pytest's summary line,
    its output and, with `sample`, where its CPU time went by process (`processes`)."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, *args, "--durations=0", "--durations-min=0"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as run:
        sampler = ProcessSampler(run.pid) if sample else None
        stdout, _ = run.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    by_process = []
    if sampler is not None:
        sampler.stop()
        by_process = processes(sampler, cpu)
    summary = stdout.strip().splitlines()[-1] if stdout.strip() else f"exit {run.returncode}"
    return wall, re.sub(r"=+", "", summary).strip(), stdout, by_process


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
    parser.add_argument(
        "--processes", action="store_true", help="also sum each run's CPU time by the processes it started (Linux)"
    )
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
                wall, summary, output, by_process = timed_run(run_args, tree, sample=args.processes)
                lines.append(f"| {code}{name} | `python {' '.join(run_args)}` | {wall / 60:.1f} min | {summary} |")
                print(lines[-1], file=sys.stderr, flush=True)
                breakdowns += breakdown(f"{code}{name}", *where_time_goes(output)) + by_process
    lines += breakdowns
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
