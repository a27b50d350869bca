"""The optional `transformers` extra: torch and transformers, `pip install 'lm-verifier[transformers]'`.

The core (the reference, the properties, the plugin, the formats, the CLI) runs without them. What
needs them (the built-in `transformers` model, transformers' parameter counts and configs,
pickled `.bin` checkpoints, the audit's claims about transformers) asks `missing` first and skips
or stops with the reason it gives. Presence is looked up without importing (torch takes seconds).
"""

from __future__ import annotations

import importlib.util

INSTALL = "pip install 'lm-verifier[transformers]'"
MODULES = ("torch", "transformers")


class ExtraMissing(ImportError):
    """What was asked for needs the `transformers` extra, which is not installed; the message says how to."""


def installed(module: str) -> bool:
    """Whether `module` can be imported here (looked up, not imported)."""
    return importlib.util.find_spec(module) is not None


def missing(what: str, modules: tuple[str, ...] = MODULES) -> str | None:
    """Why `what` cannot run here (its `modules` are not all installed), or None when it can."""
    absent = [name for name in modules if not installed(name)]
    if not absent:
        return None
    return f"{what} needs {' and '.join(modules)} ({', '.join(absent)} not installed here: {INSTALL})"


def require(what: str, modules: tuple[str, ...] = MODULES) -> None:
    """Raise ExtraMissing, saying why, unless `modules` are installed."""
    reason = missing(what, modules)
    if reason is not None:
        raise ExtraMissing(reason)
