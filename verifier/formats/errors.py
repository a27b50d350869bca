"""The one error type of every reader and writer of model files."""

from __future__ import annotations

from os import PathLike
from typing import Any

# The cut of every message is verifier.messages'; readers of model files import it from here as well.
from verifier.messages import MAX_QUOTED as MAX_QUOTED
from verifier.messages import BoundedMessage, one_line, quoted


class CheckpointError(BoundedMessage, ValueError):
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
