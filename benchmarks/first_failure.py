"""When a failing model's first failure reaches the screen, and its verdict: `verifier check` on catalog
mutants and on a port with the bugs of a port, the whole suite (the `ci` profile) and with the early-verdict
option, at git revision REV and here, model by model in one run. Measured, never asserted.

    python benchmarks/first_failure.py --before REV            # print a Markdown section
    python benchmarks/first_failure.py --before REV --write    # ... and put it into benchmarks/RESULTS.md

"On screen" is the time from the command's start to the first line of its output that shows a failure:
the first failure's own line where the revision has one, else the progress line's first `F` (written when
the failing property ends, after Hypothesis shrank its case). The early-verdict option is
`--first-failure`, or, at a revision without it, the plugin options it stands for (`EARLY`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe, worktree  # noqa: E402
from benchmarks.results_file import emit  # noqa: E402

# Two catalog mutants of two families; a Llama 2 port (`tests/plugin/llama2_port.py`) that does not run the
# switches `llama` draws; and the slip of the Qwen3 walk-through (examples/torch_qwen3.py with its q/k norms
# after RoPE), whose first failure is a generated example that Hypothesis then shrinks. The ports are
# written beside the runs, so that both revisions import the same files.
MODELS = (
    "tests.meta.mutants.catalog:mutants.QKNormAfterRope",
    "tests.meta.mutants.catalog:mutants.WindowOffByOne",
    "llama2_port:build",
    "my_qwen3:build",
)
# The walk-through's slip, as docs/how-to/port-a-family.md shows it.
SLIP = {
    "q = rope(rms_norm(q, self.w[f\"{p}.q_norm.weight\"], c.norm_eps), c.rope_theta)":
    "q = rms_norm(rope(q, c.rope_theta), self.w[f\"{p}.q_norm.weight\"], c.norm_eps)",
    "k = rope(rms_norm(k, self.w[f\"{p}.k_norm.weight\"], c.norm_eps), c.rope_theta)":
    "k = rms_norm(rope(k, c.rope_theta), self.w[f\"{p}.k_norm.weight\"], c.norm_eps)",
}  # fmt: skip
EARLY = ["--", "--model-maxfail", "1", "--shrink-seconds", "5"]
PROGRESS = ".FEsxX"  # the progress line's characters


def timed_check(tree: Path, model: str, early: list[str], models_dir: Path, reports: Path) -> tuple[float, float]:
    """(seconds until a failure is on screen, seconds until the verdict) of `verifier check --model model`
    with `tree`'s package first on the path; inf where no failure showed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(models_dir)])}
    command = [sys.executable, "-m", "verifier", "check", "--model", model, "--reports", str(reports)]
    start = time.perf_counter()
    shown, line = float("inf"), ""
    with subprocess.Popen([*command, *early], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) as run:
        assert run.stdout is not None
        while char := run.stdout.read(1):  # the progress line comes a character at a time
            line = "" if char == "\n" else line + char
            progress = "F" in line and set(line) <= set(PROGRESS)
            if shown == float("inf") and (progress or line == "first failure"):
                shown = time.perf_counter() - start
    return shown, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", metavar="REV", required=True, help="the revision measured beside this checkout")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    lines = [
        "## Time to the first failure",
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/first_failure.py {' '.join(sys.argv[1:] if argv is None else argv)}` "
        f"({time.strftime('%Y-%m-%d')}); each model at {args.before} then here, in turn.",
        "",
        "| model | run | on screen at " + args.before + " | on screen here | verdict at " + args.before
        + " | verdict here |",
        "|---|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, worktree(args.before, installed=True) as before:
        models_dir = Path(tmp)
        shutil.copy(ROOT / "tests" / "plugin" / "llama2_port.py", models_dir)
        qwen3 = (ROOT / "examples" / "torch_qwen3.py").read_text()
        for right, slip in SLIP.items():
            qwen3 = qwen3.replace(right, slip)
        (models_dir / "my_qwen3.py").write_text(qwen3)
        has_option = "--first-failure" in (before / "verifier" / "cli" / "check_cmd.py").read_text()
        for model in MODELS:
            for label, then, now in (("whole suite", [], []), ("early verdict", EARLY, ["--first-failure"])):
                then = ["--first-failure"] if then and has_option else then
                old = timed_check(before, model, then, models_dir, models_dir / "before")
                new = timed_check(ROOT, model, now, models_dir, models_dir / "after")
                cells = [f"{s:.1f} s" for s in (old[0], new[0], old[1], new[1])]
                name = model.rsplit(":", 1)[-1] if ":mutants." in model else model  # the catalog's, or a port
                lines.append(f"| `{name}` | {label} | {' | '.join(cells)} |")
                print(lines[-1], file=sys.stderr, flush=True)
    emit("\n".join(lines), write=args.write)


if __name__ == "__main__":
    main()
