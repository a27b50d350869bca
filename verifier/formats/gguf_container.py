"""The GGUF container read safely: a bounded scan of the header (every count and length checked against
the file) before the `gguf` package parses it, and metadata values checked by type. Separate from
`verifier.formats.gguf` because it knows the file format only, not which model a file holds."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import open_bounded

MAGIC = b"GGUF"


# GGUF value type -> its size in bytes (8: string, 9: array, whose sizes are read from the file)
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none


class _Scan:
    """Walks a GGUF header (metadata and tensor infos) checking every count and length against the
    bytes left, so that the `gguf` package, which loops over whatever count the file claims (a
    49-byte file claiming 2**61 array items never ends), is only handed a header that fits the file."""

    def __init__(self, path: Path, data: bytes | mmap.mmap, order: str) -> None:
        self.path, self.data, self.order, self.offset = path, data, order, 0

    def need(self, n_bytes: int, what: str) -> None:
        left = len(self.data) - self.offset
        if n_bytes > left:
            raise CheckpointError(self.path, what, f"claims {n_bytes:,} bytes at offset {self.offset:,}; "
                                  f"the file has {left:,} left")  # fmt: skip

    def uint(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.offset)
        self.offset += size
        return int(value)

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 count of items of at least `min_item_bytes` each, checked to fit before any loop."""
        n = self.uint("Q", what)
        self.need(n * min_item_bytes, f"{what} ({n:,} items)")
        return n

    def string(self, what: str) -> str:
        """Skip a string, returning its start (at most 100 characters: it names the field in errors)."""
        n = self.uint("Q", f"{what} length")
        self.need(n, what)
        self.offset += n
        return bytes(self.data[self.offset - n : self.offset - n + min(n, 100)]).decode("utf-8", "replace")

    def value(self, value_type: int, what: str, depth: int = 0) -> None:
        if value_type in _SCALAR_BYTES:
            self.need(_SCALAR_BYTES[value_type], what)
            self.offset += _SCALAR_BYTES[value_type]
        elif value_type == _STRING:
            self.string(what)
        elif value_type == _ARRAY and depth < _MAX_NESTING:
            item_type = self.uint("I", f"{what} item type")
            n = self.count(f"{what} array", _SCALAR_BYTES.get(item_type, 8 if item_type == _STRING else 12))
            if item_type in _SCALAR_BYTES:  # fixed-size items: checked above, skipped at once
                self.offset += n * _SCALAR_BYTES[item_type]
            else:
                for _ in range(n):
                    self.value(item_type, what, depth + 1)
        else:
            raise CheckpointError(self.path, what, "an unknown value type (or arrays nested too deep)",
                                  found=value_type)  # fmt: skip


def _scan(path: Path) -> None:
    """Raise CheckpointError unless every count and length of the GGUF header fits in the file."""
    with open_bounded(path) as reader:
        if reader.size < 24:
            return  # too short to claim anything: the package's own error is fine
        with mmap.mmap(reader.handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            (version,) = struct.unpack_from("<I", data, 4)
            order = ">" if version & 0xFFFF == 0 else "<"  # the package's test of a big-endian file
            if data[:4] != MAGIC or struct.unpack_from(order + "I", data, 4)[0] not in (2, 3):
                return  # not GGUF, or a version whose counts are u32: the package refuses it itself
            scan = _Scan(path, data, order)
            scan.offset = 8
            n_tensors = scan.count("GGUF tensor count", 8 + 4 + 4 + 8)  # name length, dims, type, offset
            n_kv = scan.count("GGUF metadata count", 8 + 4 + 1)  # key length, type, smallest value
            for i in range(n_kv):
                key = repr(scan.string(f"metadata key {i}"))  # quoted: a key may hold a newline
                scan.value(scan.uint("I", f"metadata {key} type"), f"metadata {key}")
            for i in range(n_tensors):
                scan.string(f"tensor {i} name")
                n_dims = scan.uint("I", f"tensor {i} dimension count")
                if n_dims > _MAX_DIMS:
                    raise CheckpointError(path, f"tensor {i} dimension count", f"more than {_MAX_DIMS}",
                                          found=n_dims)  # fmt: skip
                scan.need(n_dims * 8 + 4 + 8, f"tensor {i} dimensions, type and offset")
                scan.offset += n_dims * 8 + 4 + 8


def open_reader(path: Path) -> Any:
    _scan(path)
    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as e:  # the package raises whatever its parsing meets
        raise CheckpointError(path, "GGUF file", f"cannot be parsed: {type(e).__name__}: {e}") from None


def read_field(path: Path, reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is not None:
            return default
        raise CheckpointError(path, f"metadata {key}", "missing")
    try:
        return field.contents()  # the package decodes a string value here, not when it reads the file
    except UnicodeDecodeError as e:
        raise CheckpointError(path, f"metadata {key}", f"a string that is not valid UTF-8: {e.reason}") from None


def int_field(path: Path, reader: Any, key: str, default: int | None = None) -> int:
    """An integer metadata value; another type (a string, an array, a float, a bool) is a CheckpointError."""
    value = read_field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CheckpointError(path, f"metadata {key}", f"must be an integer, not {type(value).__name__}", found=value)
    return int(value)


def float32_field(path: Path, reader: Any, key: str, default: float | None = None) -> float:
    """A float metadata value (GGUF stores float32), as the shortest decimal that is that float32
    (1e-05, not 9.99e-06); another type is a CheckpointError."""
    value = read_field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CheckpointError(path, f"metadata {key}", f"must be a number, not {type(value).__name__}", found=value)
    return float(str(np.float32(value)))
