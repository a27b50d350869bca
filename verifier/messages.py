"""Messages of bounded size: a value a message quotes, and a whole message.

A hostile file's value may be 100 MB, and a message that quotes it whole is a 100 MB line on the
terminal. `quoted` cuts one value, so that the rest of the message (the problem, what was expected)
still shows; `bounded` cuts a whole message, line by line, as the last word on what is printed. The
error types the command line reports mix in `BoundedMessage`, so that their str() is bounded wherever
it is shown (the command line, the pytest plugin's usage errors).
"""

from __future__ import annotations

import reprlib
from typing import Any

MAX_QUOTED = 200  # characters of a value a message quotes
MAX_LINE = 4 * MAX_QUOTED  # characters of a message's line: its words and a few quoted values
MAX_LINES = 10  # lines of a message: the suite's are one line, so only a quoted text's can be more

_CONTAINERS = (list, tuple, dict, set, frozenset)
# Containers are shown by their first items only, so a huge one is never formatted in full.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict = 3, 10
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 20
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_QUOTED


def quoted(value: Any, *, literal: bool = False) -> str:
    """`value` as a message shows it, cut to about MAX_QUOTED characters with an ellipsis and its size:
    a string as it is (`literal`: as Python writes it, in quotes), a container by its first items."""
    if isinstance(value, str | bytes) and len(value) > MAX_QUOTED:
        # Cut before formatting: repr() of 100 MB of bytes would build a 400 MB string to show 200 characters.
        unit = "characters" if isinstance(value, str) else "bytes"
        head = _shown(value[:MAX_QUOTED], literal)[:MAX_QUOTED]
        return f"{head}... ({len(value):,} {unit})"
    if isinstance(value, _CONTAINERS):
        text = _REPR.repr(value)
        shown = _REPR.maxdict if isinstance(value, dict) else _REPR.maxlist
        size = f" ({len(value):,} items)" if len(value) > shown else ""
        return _cut(text, MAX_QUOTED) + size
    return _cut(_shown(value, literal), MAX_QUOTED)


def bounded(message: str) -> str:
    """`message` in at most MAX_LINES lines of at most MAX_LINE characters: a longer line cut with an
    ellipsis and its length, the lines past the last kept counted, and each character that is not
    printable (a control, a terminal's escape) escaped as Python escapes it. Bounding twice is bounding once."""
    lines = message.split("\n", MAX_LINES - 1)  # never more pieces than are kept: the message may be 100 MB
    if len(lines) == MAX_LINES and "\n" in lines[-1]:
        rest = lines.pop()
        more = rest.count("\n") + (not rest.endswith("\n"))  # a last line break ends a line, starts none
        lines.append(f"... ({more:,} more lines)")
    return "\n".join(_line(line) for line in lines)


def one_line(text: str) -> str:
    """`text` with each character that is not printable (a line break, a tab, a control) escaped as Python
    escapes it, so that a message quoting a file's string stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class BoundedMessage:
    """Mixed into an error type the user reads (before its exception base): str() is its message
    `bounded`. The message itself stays in `args`, whole, for code that reads it."""

    def __str__(self) -> str:
        return bounded(super().__str__())


def _shown(value: Any, literal: bool) -> str:
    return repr(value) if literal else str(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _line(text: str) -> str:
    """One line of a message, escaped and cut to MAX_LINE characters, the note of its length included."""
    shown = one_line(text[:MAX_LINE])  # escaping may lengthen it up to tenfold: cut again below
    if len(text) <= MAX_LINE and len(shown) <= MAX_LINE:
        return shown
    note = f"... ({len(text):,} characters)"
    return shown[: MAX_LINE - len(note)] + note
