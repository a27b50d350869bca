"""The optional `transformers` extra: torch and transformers, `pip install 'lm-verifier[transformers]'`.

The core (the reference, the properties, the plugin, the formats, the CLI) runs without them. What
needs them (the built-in `transformers` model, transformers' parameter counts and configs,
pickled `.bin` checkpoints, the audit's claims about transformers) asks `missing` first and skips
or stops with the reason it gives: one of them not installed, or older than the code needs
(`MINIMUM`). Presence and versions are looked up without importing (torch takes seconds).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from importlib import metadata

from verifier.messages import BoundedMessage

INSTALL = "pip install 'lm-verifier[transformers]'"
MODULES = ("torch", "transformers")
# The lowest versions the code runs on, as pyproject.toml's `transformers` extra asks (a test keeps
# them equal): transformers 5.24's models are the first to take the KV cache as `cache`; older ones
# ignore that keyword, so the built-in model would decode every chunk as if nothing came before.
MINIMUM = {"transformers": (5, 24)}


class ExtraMissing(BoundedMessage, ImportError):
    """What was asked for needs the `transformers` extra, which is not installed (or too old); the message
    says how to install it."""


def installed(module: str) -> bool:
    """Whether `module` can be imported here (looked up, not imported)."""
    return importlib.util.find_spec(module) is not None


def missing(what: str, modules: tuple[str, ...] = MODULES) -> str | None:
    """Why `what` cannot run here (its `modules` are not all installed, or one is older than MINIMUM),
    or None when it can."""
    absent = [name for name in modules if not installed(name)]
    if absent:
        return f"{what} needs {' and '.join(modules)} ({', '.join(absent)} not installed here: {INSTALL})"
    old = [(name, found) for name in modules if (found := release(name)) is not None and found < MINIMUM.get(name, ())]
    if old:
        needed = ", ".join(
            f"{name} >= {'.'.join(map(str, MINIMUM[name]))} ({'.'.join(map(str, found))} is installed here)"
            for name, found in old
        )
        return f"{what} needs {needed}: {INSTALL}"
    return None


@functools.cache  # each build of a model asks; reading a distribution's metadata takes milliseconds
def release(module: str) -> tuple[int, ...] | None:
    """The release numbers of the installed distribution named like `module` (5.24.0rc1 -> (5, 24, 0)),
    or None if there is none: looked up once per process, not imported."""
    try:
        text = metadata.version(module)
    except metadata.PackageNotFoundError:
        return None
    numbers = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(map(int, numbers.group().split("."))) if numbers else None


def require(what: str, modules: tuple[str, ...] = MODULES) -> None:
    """Raise ExtraMissing, saying why, unless `modules` are installed and new enough."""
    reason = missing(what, modules)
    if reason is not None:
        raise ExtraMissing(reason)
