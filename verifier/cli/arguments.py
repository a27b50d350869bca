"""Argument types shared by subcommands: a bad value is argparse's usage error (exit 2), not a traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verifier.model.config import FAMILIES

MAX_SEED = 2**32 - 1  # NumPy's generators take seeds in [0, 2**32 - 1]


def nonempty(text: str) -> str:
    """A path or name given explicitly: empty is refused (`--reports "$DIR"` with DIR unset in CI would
    otherwise mean the current directory, or the default, without a word)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty value names nothing; give one or leave the option out")
    return text


def seed(text: str) -> int:
    """A seed of the random weights: an integer in [0, MAX_SEED]."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, {MAX_SEED}], not {text!r}")
    return value


def families(text: str) -> list[str]:
    """Families, comma-separated, each one of FAMILIES; each once, in the order given."""
    names = [f.strip() for f in text.split(",") if f.strip()]
    if not names or [f for f in names if f not in FAMILIES]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected families of {', '.join(FAMILIES)}")
    return list(dict.fromkeys(names))


def import_from_the_current_directory() -> None:
    """Let `module.path:factory` specs import from the current directory, as `verifier check` does (pytest runs
    as `python -m pytest`, which puts it first on sys.path); the `verifier` script's own path lacks it."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def positive_seconds(text: str) -> float:
    """A duration in seconds: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value
