"""The engine matrix as published: `verifier matrix` on the engines and precision classes a user can
pip-install here, every family, with its results kept in `benchmarks/matrix/` (matrix.json, .md,
.html and each cell's reports) and its table in benchmarks/RESULTS.md.

    python benchmarks/matrix.py            # run (resumable: finished cells are kept) and print
    python benchmarks/matrix.py --write    # ... and put the table into benchmarks/RESULTS.md

The command it runs is printed first: it is the one that reproduces the published matrix.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
from benchmarks._machine import describe  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402

OUT = ROOT / "benchmarks" / "matrix"
# The engines at the precision they run, and the reference's own classes as a baseline.
MODELS = ("transformers", "transformers-bfloat16", "numpy-q8_0", "llamacpp", "llamacpp-q8_0", "llamacpp-q4_0",
          "litgpt", "transformer-lens", "onnxruntime", "ctranslate2", "ctranslate2-int8")  # fmt: skip
# The properties of agreement with the oracle that every engine runs (logits, and decode where it has a
# cache), in the `checkpoint` profile (the pinned cases and 3 drawn): a matrix of 121 cells in hours, not days.
PROPERTIES = "logits_agree or decoding_in_chunks"


def command() -> list[str]:
    models = [a for m in MODELS for a in ("--model", m)]
    return [sys.executable, "-m", "verifier", "matrix", *models, "--out", str(OUT), "--hypothesis-profile",
            "checkpoint", "--", "-k", PROPERTIES]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="put the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    shown = " ".join(shlex.quote(a) for a in ["verifier", *command()[3:]])
    print(shown, flush=True)
    subprocess.run(command(), cwd=ROOT)  # its exit status is the matrix's verdict, not this script's
    table = (OUT / "matrix.md").read_text().split("\n", 2)[2]  # without its title
    section = f"## The engine matrix\n\nMachine: {describe()}\n\nCommand: `{shown}`\n\n{table}"
    print(section)
    if args.write:
        write_section(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
