"""What a run of the property suite on a full-size checkpoint costs: `verifier check --checkpoint` on
GPT-2 124M and stories15M-shaped checkpoints (seeded weights, written here), per model and profile,
with the wall time, the properties run and the examples; into benchmarks/RESULTS.md (section
"Properties on a full-size checkpoint"; the other sections are kept).

    python benchmarks/checkpoint_runs.py --scratch /tmp/ckpt                 # ci and checkpoint profiles
    python benchmarks/checkpoint_runs.py --scratch /tmp/ckpt --profiles checkpoint --models numpy

Run from the project root; each run is one `verifier check` subprocess, so it measures what a user waits for.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks._machine import describe
from benchmarks.results_file import write_section
from verifier.formats import save_checkpoint
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.report.results import Report

SECTION = "## Properties on a full-size checkpoint"
CHECKPOINTS = {
    "gpt2 (124M, HF safetensors)": ("gpt2", "hf"),
    "stories15M (llama2.c v0)": ("llama2c-stories15M", "llama2c"),
}


def write(directory: Path, preset_name: str, fmt: str) -> Path:
    path = directory / (f"{preset_name}.bin" if fmt == "llama2c" else preset_name)
    if not path.exists():
        config = preset(preset_name)
        save_checkpoint(path, config, init_weights(config, seed=0), format=fmt)
    return path


def run(model: str, path: Path, profile: str, reports: Path) -> tuple[float, Report]:
    command = [sys.executable, "-m", "verifier", "check", "--model", model, "--checkpoint", str(path),
               "--hypothesis-profile", profile, "--reports", str(reports), "--", "-p", "no:cacheprovider"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, Report.read(reports / "conformance.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where to write the checkpoints (default: a temp dir)"
    )
    parser.add_argument("--profiles", default="checkpoint,ci", help="comma-separated Hypothesis profiles")
    parser.add_argument("--models", default="numpy,transformers", help="comma-separated models")
    parser.add_argument("--write", action="store_true", help=f"rewrite the section {SECTION!r} of RESULTS.md")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="checkpoint-runs-"))
    scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, (preset_name, fmt) in CHECKPOINTS.items():
        path = write(scratch, preset_name, fmt)
        for profile in args.profiles.split(","):
            for model in args.models.split(","):
                seconds, report = run(model, path, profile, scratch / f"reports-{preset_name}-{profile}-{model}")
                v = next(v for v in report.verdicts() if v.model == model)
                counts = f"{v.verdict} | {v.passed} | {v.skipped} | {v.examples}"
                row = f"| {label} | `{model}` | {profile} | {counts} | {seconds:.0f} |"
                print(row, flush=True)
                rows.append(row)
    command = f"python benchmarks/checkpoint_runs.py --profiles {args.profiles} --models {args.models}"
    text = "\n".join([
        SECTION, "",
        f"Machine: {describe()}.", f"Command: `{command}` (one `verifier check --checkpoint` per row, seeded weights).",
        "Wall time of the whole `verifier check` (start, probes, every property, reports).", "",
        "| checkpoint | model | profile | verdict | properties run | skipped | examples | time (s) |",
        "|---|---|---|---|---:|---:|---:|---:|", *rows,
    ])  # fmt: skip
    if args.write:
        write_section(text)
    print(text)


if __name__ == "__main__":
    main()
