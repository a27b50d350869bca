"""The one error type of every reader and writer of model files."""

from __future__ import annotations

import reprlib
from os import PathLike
from typing import Any

MAX_QUOTED = 200  # characters of a value a message quotes: a hostile file's value may be 100 MB

# Containers are shown by their first items only, so a huge one is never formatted in full.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 20, 20, 10, 10
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_QUOTED


def quoted(value: Any) -> str:
    """`value` as a message shows it (a string as is), cut to about MAX_QUOTED characters."""
    containers = (list, tuple, dict, set, frozenset)  # shown as str() shows them, without formatting all items
    text = _REPR.repr(value) if isinstance(value, containers) else str(value)
    return text if len(text) <= MAX_QUOTED else f"{text[:MAX_QUOTED]}... ({len(text):,} characters)"


def one_line(text: str) -> str:
    """`text` with each character that is not printable (a line break, a tab, a control) escaped as Python
    escapes it, so that a message quoting a file's string stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class CheckpointError(ValueError):
    """A file that cannot be read as what it claims to be.

    The message names the file, the field or tensor at fault, and what was expected and found.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        what: str,
        problem: str,
        *,
        expected: Any = None,
        found: Any = None,
    ) -> None:
        parts = [
            f"{label} {quoted(value)}"
            for label, value in (("expected", expected), ("found", found))
            if value is not None
        ]
        detail = f" ({', '.join(parts)})" if parts else ""
        # `what` may name a tensor or shard as the file spells it: 100 KB long, or holding a line break.
        super().__init__(one_line(f"{path}: {quoted(what)}: {problem}{detail}"))
        self.path = str(path)
        self.what = what
        self.expected = expected
        self.found = found
