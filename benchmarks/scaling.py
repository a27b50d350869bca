"""One verification spread over pytest-xdist workers: the same `verifier check` in one process, on 1
and 2 workers of this host, and on 2 execnet gateways (the mechanism of remote hosts, here over local
pipes), measured side by side in one run, never asserted.

    python benchmarks/scaling.py                   # measure and print a Markdown section
    python benchmarks/scaling.py --write           # ... and put it into benchmarks/RESULTS.md
    python benchmarks/scaling.py --models numpy transformers
    python benchmarks/scaling.py --before REV      # ... and the one-process check at git revision REV
    python benchmarks/scaling.py --before REV --before-only   # that check before and after, no other rows

Speed-up is the one-process time over the setup's; the ideal is the number of workers (so a worker's
start-up, its own collection and Hypothesis's per-process work show as the gap). Workers on other hosts
are given the same way, one `--tx ssh=user@host//python=/path/to/venv/bin/python` per host (the suite
and the model installed there): the gateway row runs that code path without the network.

`--before REV` also times the one-process check of the code at REV (a temporary worktree, its package
and suite imported ahead of this checkout's), the two alternately in this run, so that a change to the
time of one `verifier check` is measured side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe, worktree  # noqa: E402
from benchmarks.results_file import write_data, write_section  # noqa: E402

# Every worker's OpenBLAS pool (NumPy's) the size of the machine, as before the plugin gave each worker its
# share of the cores (torch's pools were one thread already: properties/conftest.py sets OMP_NUM_THREADS=1).
WHOLE_MACHINE = {"OPENBLAS_NUM_THREADS": str(os.cpu_count())}
# (setup, workers, pytest arguments after `--`, environment added)
SETUPS: tuple[tuple[str, int, list[str], dict[str, str]], ...] = (
    ("one process", 1, ["-p", "no:xdist"], {}),
    ("1 worker", 1, ["-n", "1"], {}),
    ("2 workers", 2, ["-n", "2"], {}),
    ("2 workers, each OpenBLAS pool the machine's size (before)", 2, ["-n", "2"], WHOLE_MACHINE),
    ("2 execnet gateways (as remote hosts)", 2, ["-d", "--tx", f"2*popen//python={sys.executable}"], {}),
)


def timed_check(
    model: str, pytest_args: list[str], tree: Path = ROOT, extra_env: dict[str, str] | None = None
) -> tuple[float, str]:
    """Wall time of `verifier check --model MODEL -- ARGS` and the summary line of its pytest log, with
    the package and suite of `tree` (this checkout, or a worktree of another revision), `extra_env` set."""
    env = {**os.environ, "PYTHONPATH": str(tree), **(extra_env or {})}  # ahead of the editable install's finder
    with tempfile.TemporaryDirectory() as reports:
        verify = [sys.executable, "-m", "verifier", "check", "--model", model, "--reports", reports]
        command = [*verify, "--", *pytest_args]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        log = Path(reports, "pytest.log")
        lines = log.read_text().strip().splitlines() if log.exists() else []
    if done.returncode not in (0, 1):  # 1: a property failed, still a measured run
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    summary = re.sub(r"=+", "", lines[-1]).strip() if lines else f"exit {done.returncode}"
    return wall, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["numpy", "transformers"], help="the models verified")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    parser.add_argument("--before", metavar="REV", help="also time the one-process check at git revision REV")
    parser.add_argument("--before-only", action="store_true", help="with --before: only the checks before and after")
    args = parser.parse_args()
    if args.before_only and (not args.before or args.write):
        parser.error("--before-only needs --before, and writes nothing (the section holds every setup)")
    load = os.getloadavg()[0]
    command = f"python benchmarks/scaling.py --models {' '.join(args.models)}"
    command += f" --before {args.before}" if args.before else ""
    command += " --before-only" if args.before_only else ""
    tables: list[str] = []
    data: dict[str, list[dict]] = {}
    before: dict[str, list[dict]] = {}
    if args.before:
        with worktree(args.before, installed=True) as tree:
            for model in args.models:
                before[model] = before_and_after(model, tree, args.before)
                tables += ["", f"`--model {model}`, one process, alternately:", "", *pairs(before[model])]
    for model in [] if args.before_only else args.models:
        results = []
        for name, workers, pytest_args, extra_env in SETUPS:
            wall, summary = timed_check(model, pytest_args, extra_env=extra_env)
            results.append((name, workers, pytest_args, wall, summary))
            print(f"{model}, {name}: {wall:.1f} s, {summary}", file=sys.stderr, flush=True)
        tables += ["", f"`--model {model}`:", "", *_table(results)]
        data[model] = [
            {"setup": name, "workers": workers, "pytest_args": " ".join(a).replace(sys.executable, "PYTHON"),
             "seconds": wall, "summary": summary}
            for name, workers, a, wall, summary in results
        ]  # fmt: skip
    lines = [
        "## Scaling out: one verification over pytest-xdist workers",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}{' --write' if args.write else ''}` "
        f"({time.strftime('%Y-%m-%d')}); load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after. "
        "Each row is `verifier check --model MODEL -- ARGS` (the ci profile), in this run.",
        *tables,
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)
        write_data("scaling", {"machine": describe(), "command": f"{command} --write",
                               "date": time.strftime("%Y-%m-%d"), "load": load, "models": data,
                               "before": before})  # fmt: skip


BEFORE_ROUNDS = 2  # each code's one-process check, alternately, this many times


def before_and_after(model: str, tree: Path, revision: str) -> list[dict]:
    """The one-process check of the code at `revision` (in `tree`) and of this checkout, alternately."""
    rows = []
    for round_ in range(BEFORE_ROUNDS):
        for code, where in ((revision, tree), ("this checkout", ROOT)):
            wall, summary = timed_check(model, ["-p", "no:xdist"], where)
            rows.append({"code": code, "round": round_ + 1, "seconds": wall, "summary": summary})
            print(f"{model}, {code}, round {round_ + 1}: {wall:.1f} s, {summary}", file=sys.stderr, flush=True)
    return rows


def pairs(rows: list[dict]) -> list[str]:
    lines = ["| code | round | wall time | pytest's summary |", "|---|---:|---:|---|"]
    return lines + [f"| {r['code']} | {r['round']} | {r['seconds']:.1f} s | {r['summary']} |" for r in rows]


def _table(results: list[tuple[str, int, list[str], float, str]]) -> list[str]:
    base = results[0][3]
    lines = [
        "| setup | pytest arguments | wall time | speed-up | ideal | efficiency | pytest's summary |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, workers, pytest_args, wall, summary in results:
        shown = " ".join(pytest_args).replace(sys.executable, "PYTHON")
        lines.append(
            f"| {name} | `{shown}` | {wall:.1f} s | {base / wall:.2f} | {workers} | {base / wall / workers:.0%} "
            f"| {summary} |"
        )
    return lines


if __name__ == "__main__":
    main()
