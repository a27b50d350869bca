"""The one error type of every reader and writer of model files."""

from __future__ import annotations

from os import PathLike
from typing import Any


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
        parts = [f"{label} {value}" for label, value in (("expected", expected), ("found", found)) if value is not None]
        detail = f" ({', '.join(parts)})" if parts else ""
        super().__init__(f"{path}: {what}: {problem}{detail}")
        self.path = str(path)
        self.what = what
        self.expected = expected
        self.found = found
