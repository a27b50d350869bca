"""Where the optional shared data lives (the real GPT-2 tokenizer, llama2.c's `tokenizer.bin`).

The suite never requires it: code that uses it asks `data_dir()` and skips, saying why, when it
is None. `VERIFIER_DATA_DIR` overrides the default, `<checkout>/../shared/data`, which is used only
when it exists (a developer's or CI's checkout; an installed package has none).
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "VERIFIER_DATA_DIR"
_DEFAULT = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def data_dir() -> Path | None:
    """The shared data directory: $VERIFIER_DATA_DIR if set, else the default if it exists, else None."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    return _DEFAULT if _DEFAULT.is_dir() else None
