"""Where the tokenizer files live: GPT-2's `gpt2-tokenizer/` (vocab.json, merges.txt) and llama2.c's
`llama2c/tokenizer.bin`, shipped in the package (`verifier/data/`, with their license notices).

`VERIFIER_DATA_DIR` replaces the packaged directory with one of the same layout.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "VERIFIER_DATA_DIR"
PACKAGED_DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def data_dir() -> Path:
    """The tokenizer data directory: $VERIFIER_DATA_DIR if set, else the one shipped in the package."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else PACKAGED_DATA_DIR
