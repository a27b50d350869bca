"""What a run of the property suite on a full-size checkpoint costs: `verifier check --checkpoint` on
GPT-2 124M and stories15M-shaped checkpoints (seeded weights, written here), per model and profile,
with the wall time, the properties run and the examples; into benchmarks/RESULTS.md (section
"Properties on a full-size checkpoint"; the other sections are kept).

    python benchmarks/checkpoint_runs.py --scratch /tmp/ckpt                 # ci and checkpoint profiles
    python benchmarks/checkpoint_runs.py --scratch /tmp/ckpt --profiles checkpoint --models numpy
    python benchmarks/checkpoint_runs.py --scratch /big/disk --llama-7b --write   # its own section

`--llama-7b` writes a Llama-2-7B-shaped checkpoint (27 GB of float32 safetensors, shard by shard, as
`benchmarks/full_size.py` does), runs the reference (streamed) on it through `--checkpoint` on the
oracle-agreement property (profile `checkpoint`), records the run's peak resident set, and removes it.
Run from the project root; each run is one `verifier check` subprocess, so it measures what a user waits for.
"""

from __future__ import annotations

import argparse
import resource
import shutil
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
SECTION_7B = "## Properties on a Llama-2-7B-shaped checkpoint"
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


def run(model: str, path: Path, profile: str, reports: Path, *pytest_args: str) -> tuple[float, Report]:
    command = [sys.executable, "-m", "verifier", "check", "--model", model, "--checkpoint", str(path),
               "--hypothesis-profile", profile, "--reports", str(reports), "--", "-p", "no:cacheprovider",
               *pytest_args]  # fmt: skip
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
    parser.add_argument("--llama-7b", action="store_true", help="the Llama-2-7B-shaped run instead (see above)")
    parser.add_argument("--write", action="store_true", help="rewrite the section in RESULTS.md")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="checkpoint-runs-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if args.llama_7b:
        llama_7b(scratch, write=args.write)
        return
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


def llama_7b(scratch: Path, *, write: bool) -> None:
    from benchmarks.full_size import write_checkpoint

    path = scratch / "llama-2-7b"
    written = write_checkpoint("llama-2-7b", path)
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    try:
        seconds, report = run("numpy", path, "checkpoint", scratch / "reports-7b", "-k", "logits_agree")
    finally:
        shutil.rmtree(path)
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    v = next(v for v in report.verdicts() if v.model == "numpy")
    ratios = [r.worst_error_ratio for r in report.results if r.worst_error_ratio is not None]
    text = "\n".join([
        SECTION_7B, "",
        f"Machine: {describe()}.",
        "Command: `python benchmarks/checkpoint_runs.py --scratch DIR --llama-7b --write`: a Llama-2-7B-shaped "
        f"checkpoint with seeded weights ({size / 1e9:.1f} GB of float32 safetensors, written in {written:.0f} s), "
        "then `verifier check --model numpy --checkpoint DIR --hypothesis-profile checkpoint -- -k logits_agree`: "
        "the reference in float32 (streamed: it is given the mapped weights) against the streamed float64 oracle.",
        "",
        f"- verdict: {v.verdict} ({v.passed} property run, {v.examples} examples; worst error / tolerance "
        f"{max(ratios, default=float('nan')):.3g})",
        f"- wall time of the whole run (probes, sha256 of 27 GB, every example): {seconds:.0f} s",
        f"- peak resident set of the largest process of the run (getrusage, children): {peak_gib:.2f} GiB",
    ])  # fmt: skip
    if write:
        write_section(text)
    print(text)


if __name__ == "__main__":
    main()
