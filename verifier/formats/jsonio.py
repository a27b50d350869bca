"""JSON from a model's files, parsed in one guarded place: every failure is a one-line CheckpointError.

`json.loads` raises more than `JSONDecodeError` on hostile input: RecursionError for JSON nested
deeper than the interpreter's recursion limit (100,000 `[` take a few hundred KB; no model file
nests more than a few levels), and ValueError for an integer of more digits than Python converts
(`sys.get_int_max_str_digits`). Every reader of JSON in the formats goes through `parse_json`.
"""

from __future__ import annotations

import json
from os import PathLike
from pathlib import Path
from typing import Any

from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import read_small


def parse_json(path: str | PathLike[str], what: str, raw: bytes) -> Any:
    """The JSON value of UTF-8 bytes `raw` (the contents of `what` in file `path`)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(path, what, f"not valid UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(path, what, f"not valid JSON: {e}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise CheckpointError(path, what, "JSON nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise CheckpointError(path, what, f"not valid JSON: {str(e)[:80]}") from None


def read_json(path: Path, what: str, max_bytes: int) -> Any:
    """The JSON value of the file at `path` (`what` names it in errors), at most `max_bytes` long:
    parsing takes up to ~30 times a file's size in memory (100 MB of `[]` took 2.8 GB)."""
    return parse_json(path, what, read_small(path, what, max_bytes))
