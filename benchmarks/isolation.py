"""What the harness around the model under test costs (issue 45): a call through the contract against the
same call made directly, one `verifier check` of the NumPy reference before and after, and a model that
prints a lot, before and after; measured side by side in one run, never asserted.

    python benchmarks/isolation.py --before REV           # print a Markdown section
    python benchmarks/isolation.py --before REV --write   # ... and put it into benchmarks/RESULTS.md

A call through the contract (`verifier.plugin.contract.CheckedModel`) copies the tokens in and the logits
out, checks them, and runs under `verifier.plugin.isolation.guarded` (the model's own process-wide state
swapped in and the suite's put back, exits refused, a deadline, what it prints bounded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CALLS = 2000
# A correct model that prints MB megabytes through sys.stdout in every call (its module, written for the run).
PRINTER = """
from verifier.reference import NumpyModel

class Printer:
    def __init__(self, config, weights):
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens):
        for _ in range({mb}):
            print("x" * (1 << 20))
        return self.ref.logits(tokens)

def build(config, weights):
    return Printer(config, weights)
"""


def per_call() -> dict[str, float]:
    """Microseconds a call, in this process with the package it imports: the reference's logits of 12
    tokens directly, through the contract, and (where the package has it) an empty call through `guarded`."""
    import numpy as np

    from verifier.model.weights import init_weights
    from verifier.plugin.adapters import reference
    from verifier.plugin.contract import build_checked
    from verifier.plugin.probes import PROBE_CONFIGS
    from verifier.plugin.registry import ModelSpec

    config = PROBE_CONFIGS["gpt2"]
    weights = init_weights(config, seed=0)
    tokens = np.arange(12) % config.vocab_size
    direct = reference.build(config, weights)
    checked = build_checked(ModelSpec("numpy", reference.build, "benchmark"), config, weights)
    calls = {CALLED[0]: lambda: direct.logits(tokens), CALLED[1]: lambda: checked.logits(tokens)}
    try:
        from verifier.plugin import isolation
    except ImportError:  # the code before it
        pass
    else:
        context = isolation.Context()

        def empty() -> None:
            with isolation.guarded(context):
                pass

        calls[CALLED[2]] = empty
    found = {}
    for name, call in calls.items():
        best = float("inf")
        for _ in range(3):  # the fastest of three rounds: the machine is shared
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            best = min(best, (time.perf_counter() - start) / CALLS)
        found[name] = best * 1e6
    return found


CALLED = (
    "the reference's logits, called directly",
    "the same through the contract",
    "an empty call through `guarded` alone",
)


def per_call_of(tree: Path) -> dict[str, float]:
    """`per_call()` with the package of `tree`, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--per-call"], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def printing(tree: Path, mb: int) -> tuple[float, float, str]:
    """Wall seconds, peak resident GiB (the largest process of the run) and the verdict line of one property
    on a model printing `mb` MB a call, with the package of `tree`."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "printer.py").write_text(textwrap.dedent(PRINTER).format(mb=mb))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), tmp])}
        command = [
            sys.executable, "-m", "verifier", "check", "--model", "printer:build", "--reports", f"{tmp}/reports",
            "--", "-p", "no:xdist", "-k", "test_logits_agree_with_the_oracle",
        ]  # fmt: skip
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert process.stdout is not None
        out = process.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(process.pid, 0)  # the run's own resources, its pytest's included
        process.returncode = os.waitstatus_to_exitcode(status)
        verdict = next((line for line in out.splitlines() if line.startswith("printer:build:")), "no verdict")
        return time.perf_counter() - start, usage.ru_maxrss / 2**20, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", metavar="REV", help="the code to compare with (git revision)")
    parser.add_argument("--per-call", action="store_true", help=argparse.SUPPRESS)  # per_call() as JSON
    parser.add_argument("--print-mb", type=int, default=16, help="what the printing model prints a call (MB)")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    if args.per_call:
        print(json.dumps(per_call()))
        return
    if not args.before:
        parser.error("--before REV is needed")
    # Imported here: with --per-call, what is imported is the package of $PYTHONPATH, the code measured.
    sys.path.insert(0, str(ROOT))  # run as a script from anywhere
    from benchmarks._machine import describe, worktree
    from benchmarks.results_file import write_section
    from benchmarks.scaling import before_and_after, pairs

    load = os.getloadavg()[0]
    command = f"python benchmarks/isolation.py --before {args.before} --print-mb {args.print_mb}"
    revision = subprocess.run(  # the code measured, as it was named: "HEAD" names another commit tomorrow
        ["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with worktree(args.before, installed=True) as tree:
        calls = ["| call | " + f"{args.before} | this checkout |", "|---|---:|---:|"]
        before, after = per_call_of(tree), per_call_of(ROOT)
        calls += [
            f"| {name} | {f'{before[name]:.0f} µs' if name in before else '-'} | {after[name]:.0f} µs |"
            for name in CALLED
        ]
        print(*calls, sep="\n", file=sys.stderr, flush=True)
        checks = before_and_after("numpy", tree, args.before)
        prints = []
        for code, where in ((args.before, tree), ("this checkout", ROOT)):
            wall, peak, verdict = printing(where, args.print_mb)
            prints.append(f"| {code} | {wall:.1f} s | {peak:.2f} GiB | {verdict} |")
            print(prints[-1], file=sys.stderr, flush=True)
    lines = [
        "## The model under test: what the harness costs",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `{command}{' --write' if args.write else ''}` ({time.strftime('%Y-%m-%d')}); load average "
        f"(1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after. This checkout (its working tree) is measured "
        f"against {args.before} ({revision}), in this run.",
        "",
        "One call (GPT-2's probe config, 12 tokens), the fastest of 3 rounds of 2,000, each code in its own process:",
        "",
        *calls,
        "",
        "`verifier check --model numpy`, one process (the ci profile), alternately:",
        "",
        *pairs(checks),
        "",
        f"A correct model printing {args.print_mb} MB a call through `sys.stdout`, one property "
        "(`-k test_logits_agree_with_the_oracle`); peak: the largest process of the run:",
        "",
        "| code | wall time | peak resident | verdict |",
        "|---|---:|---:|---|",
        *prints,
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
