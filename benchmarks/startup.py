"""Start-up: what `import verifier`, the imports of a run before any model is built (the package, the
CLI, the plugin with the built-in models registered, the suite's modules), `verifier --help` and
`verifier check --model numpy` (the ci profile) take, each in a fresh process, and which of the optional
extras' packages each imports (`tests/startup_probe.py`'s HEAVY: torch, transformers, the engines...).
Measured, never asserted: tests/cli/test_startup.py asserts the imports.

    python benchmarks/startup.py                  # measure and print a Markdown section
    python benchmarks/startup.py --write          # ... and put it into benchmarks/RESULTS.md
    python benchmarks/startup.py --rounds 5
    python benchmarks/startup.py --before DIR --before-label "abc1234"   # ... and the tree at DIR, alternately

`--before DIR` measures a copy of the project in another state (`git worktree add DIR REV`, or
`git archive REV | tar -x -C DIR`), its package and suite imported ahead of this checkout's (the folders
the install maps into the package are linked under DIR's package), alternately with this checkout.

Each process's CPU time (user + system, its children's included) is given beside its wall time. Both
grow with the machine's other load (measured: a check's CPU time from 25 s to 52 s with two other suite
runs on the 2 cores), so the table's figure is each measurement's fastest run (as speed.py keeps the fastest
round), the section states the load average, and a figure is only comparable with one of the same run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import as_installed, describe  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402
from tests.startup_probe import HEAVY, IMPORT_ALL  # noqa: E402

PROBE = ROOT / "tests" / "startup_probe.py"


@dataclass
class Run:
    seconds: float  # wall time; for `import verifier`, -X importtime's cumulative figure
    cpu: float  # the process's user + system time, its children's included
    imported: list[str] | None  # the packages of HEAVY it imported (None: not looked at)
    note: str = ""  # pytest's summary of a check


def _run(tree: Path, command: list[str], cwd: Path, probe_dir: Path | None = None) -> tuple[float, float, str, str]:
    """Wall time, CPU time, stdout and stderr of `command`, the package and suite of `tree` first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *([str(probe_dir)] if probe_dir else [])])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: a property failed, still a measured run
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-1000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stdout, done.stderr


def _printed(stdout: str) -> list[str]:
    """The list of names a program printed last (`['torch', 'transformers']`)."""
    return re.findall(r"'(\w+)'", stdout.strip().splitlines()[-1])


def import_verifier(tree: Path, work: Path) -> Run:
    """`import verifier`: its cumulative time as -X importtime reports it."""
    code = f"import sys, verifier; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    _, cpu, stdout, stderr = _run(tree, [sys.executable, "-X", "importtime", "-c", code], work)
    cumulative = re.search(r"^import time:\s+\d+ \|\s+(\d+) \| verifier$", stderr, re.M)
    if cumulative is None:
        raise SystemExit(f"no `verifier` line in -X importtime's output: {stderr[-1000:]}")
    return Run(int(cumulative.group(1)) / 1e6, cpu, _printed(stdout))


def import_all(tree: Path, work: Path) -> Run:
    """The imports of a run before any model is built (IMPORT_ALL)."""
    wall, cpu, stdout, _ = _run(tree, [sys.executable, "-c", IMPORT_ALL], work)
    return Run(wall, cpu, _printed(stdout))


def cli_help(tree: Path, work: Path) -> Run:
    """`verifier --help` (what it imports is a part of IMPORT_ALL's)."""
    wall, cpu, _, _ = _run(tree, [sys.executable, "-m", "verifier", "--help"], work)
    return Run(wall, cpu, None)


def check_numpy(tree: Path, work: Path) -> Run:
    """`verifier check --model numpy`, the probe recording what its pytest run imports."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        probe_dir, out, reports = Path(tmp, "probe"), Path(tmp, "imported.txt"), Path(tmp, "reports")
        probe_dir.mkdir()
        shutil.copy(PROBE, probe_dir / "startup_probe.py")
        command = [sys.executable, "-m", "verifier", "check", "--model", "numpy", "--reports", str(reports), "--",
                   "-p", "startup_probe", f"--startup-probe={out}"]  # fmt: skip
        wall, cpu, _, _ = _run(tree, command, Path(tmp), probe_dir)
        noted = [line.rpartition(": ")[2] for line in out.read_text().splitlines() if not line.startswith("ran: ")]
        log = (reports / "pytest.log").read_text().strip().splitlines()
    imported = sorted({name for names in noted for name in names.split(", ")})
    return Run(wall, cpu, imported, re.sub(r"=+", "", log[-1]).strip() if log else "")


MEASUREMENTS: tuple[tuple[str, Callable[[Path, Path], Run]], ...] = (
    ("`import verifier` (-X importtime, cumulative)", import_verifier),
    ("imports before a model: package, CLI, plugin, built-in models, suite", import_all),
    ("`verifier --help`", cli_help),
    ("`verifier check --model numpy` (ci profile)", check_numpy),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per measurement and code (default 3)")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    parser.add_argument("--before", metavar="DIR", type=Path, help="also measure the project's copy at DIR")
    parser.add_argument("--before-label", metavar="TEXT", help="what DIR holds, for the table (default: its path)")
    args = parser.parse_args()
    codes = [("this checkout", ROOT)]
    if args.before:
        as_installed(args.before.resolve())
        codes.insert(0, (f"before: {args.before_label or args.before}", args.before.resolve()))
    load = os.getloadavg()[0]
    rows: list[tuple[str, str, list[Run]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for _, tree in codes:
            import_all(tree, work)  # untimed: compiles each tree's bytecode
        for what, measure in MEASUREMENTS:
            runs: dict[str, list[Run]] = {code: [] for code, _ in codes}
            for round_ in range(args.rounds):
                for code, tree in codes:  # alternately, so that a busy spell of the machine hits both
                    runs[code].append(run := measure(tree, work))
                    print(f"{what}, {code}, round {round_ + 1}: {run}", file=sys.stderr, flush=True)
            rows += [(what, code, measured) for code, measured in runs.items()]
    command = "python benchmarks/startup.py" + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    command += f" --before DIR --before-label {args.before_label!r}" if args.before else ""
    section = render(rows, command + (" --write" if args.write else ""), load)
    print(section)
    if args.write:
        write_section(section)


def render(rows: list[tuple[str, str, list[Run]]], command: str, load: float) -> str:
    runs_heading = " | ".join(f"run {i + 1}" for i in range(len(rows[0][2])))
    lines = [
        "## Start-up: `import verifier`, `verifier --help`, `verifier check --model numpy`",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}); load average (1 min) {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after. Each run a fresh process (two codes: alternately): its wall time, then "
        "the fastest run's, and its CPU time (user + system, children included); both grow with the machine's other "
        'load, so the fastest is the one least disturbed. "Extras imported" are the packages of '
        "`tests/startup_probe.py`'s HEAVY "
        "(torch, transformers, the engines, GGUF's reader, matplotlib...) the process imported: torch and "
        "transformers take seconds, and only a model (or a command) that uses them should import them.",
        "",
        f"| measurement | code | {runs_heading} | fastest | its CPU | extras imported |",
        f"|---|---|{'---:|' * len(rows[0][2])}---:|---:|---|",
    ]
    for what, code, runs in rows:
        ms = what.startswith("`import verifier`")
        fastest = min(runs, key=lambda r: r.seconds)
        shown = [f"{1000 * r.seconds:.0f} ms" if ms else f"{r.seconds:.2f} s" for r in [*runs, fastest]]
        cpu = fastest.cpu
        looked = [r.imported for r in runs if r.imported is not None]
        imported = ", ".join(sorted({n for names in looked for n in names})) or "none" if looked else "-"
        note = f" ({fastest.note})" if fastest.note else ""
        lines.append(f"| {what} | {code} | {' | '.join(shown)} | {cpu:.2f} s | {imported}{note} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
