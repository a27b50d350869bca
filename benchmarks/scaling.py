"""One verification spread over pytest-xdist workers: the same `verifier check` in one process, on 1
and 2 workers of this host, and on 2 execnet gateways (the mechanism of remote hosts, here over local
pipes), measured side by side in one run, never asserted.

    python benchmarks/scaling.py                   # measure and print a Markdown section
    python benchmarks/scaling.py --write           # ... and put it into benchmarks/RESULTS.md
    python benchmarks/scaling.py --models numpy transformers

Speed-up is the one-process time over the setup's; the ideal is the number of workers (so a worker's
start-up, its own collection and Hypothesis's per-process work show as the gap). Workers on other hosts
are given the same way, one `--tx ssh=user@host//python=/path/to/venv/bin/python` per host (the suite
and the model installed there): the gateway row runs that code path without the network.
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
from benchmarks._machine import describe  # noqa: E402
from benchmarks.results_file import write_data, write_section  # noqa: E402

# (setup, workers, pytest arguments after `--`)
SETUPS = (
    ("one process", 1, ["-p", "no:xdist"]),
    ("1 worker", 1, ["-n", "1"]),
    ("2 workers", 2, ["-n", "2"]),
    ("2 execnet gateways (as remote hosts)", 2, ["-d", "--tx", f"2*popen//python={sys.executable}"]),
)


def timed_check(model: str, pytest_args: list[str]) -> tuple[float, str]:
    """Wall time of `verifier check --model MODEL -- ARGS` and the summary line of its pytest log."""
    verifier = Path(sys.executable).with_name("verifier")
    with tempfile.TemporaryDirectory() as reports:
        command = [str(verifier), "check", "--model", model, "--reports", reports, "--", *pytest_args]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
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
    args = parser.parse_args()
    load = os.getloadavg()[0]
    tables: list[str] = []
    data: dict[str, list[dict]] = {}
    for model in args.models:
        results = []
        for name, workers, pytest_args in SETUPS:
            wall, summary = timed_check(model, pytest_args)
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
        f"Command: `python benchmarks/scaling.py --models {' '.join(args.models)}{' --write' if args.write else ''}` "
        f"({time.strftime('%Y-%m-%d')}); load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after. "
        "Each row is `verifier check --model MODEL -- ARGS` (the ci profile), in this run.",
        *tables,
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)
        command = f"python benchmarks/scaling.py --models {' '.join(args.models)} --write"
        write_data("scaling", {"machine": describe(), "command": command, "date": time.strftime("%Y-%m-%d"),
                               "load": load, "models": data})  # fmt: skip


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
