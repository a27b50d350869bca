"""The safetensors layout, read by the suite itself so that every header is checked before use.

A file is: u64 little-endian N, an N-byte JSON header {name: {dtype, shape, data_offsets: [begin,
end]}, "__metadata__": {str: str}}, then the data, tensors packed back to back. The header is
hostile until proven otherwise: its size, every dtype, shape and offset are checked against the
file size, and tensors must tile the data exactly, before any tensor is read.
Writing uses the `safetensors` library (the format's own writer).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verifier.formats.errors import CheckpointError, quoted
from verifier.formats.fileio import BoundedReader, atomic_path, map_array, open_bounded

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
# dtype name -> (numpy dtype of the stored bytes, float dtype it converts to, or None for non-floats)
DTYPES: dict[str, tuple[np.dtype, np.dtype | None]] = {
    "F64": (np.dtype("<f8"), np.dtype(np.float64)),
    "F32": (np.dtype("<f4"), np.dtype(np.float32)),
    "F16": (np.dtype("<f2"), np.dtype(np.float16)),
    "BF16": (np.dtype("<u2"), np.dtype(np.float32)),  # the top half of a float32
    "I64": (np.dtype("<i8"), None),
    "I32": (np.dtype("<i4"), None),
    "I16": (np.dtype("<i2"), None),
    "I8": (np.dtype("i1"), None),
    "U8": (np.dtype("u1"), None),
    "BOOL": (np.dtype("u1"), None),
}


@dataclass(frozen=True)
class Entry:
    """One tensor of the header: name, dtype name, shape, and its byte range in the data."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsFile:
    """A checked header: entries in file order and where the data starts."""

    path: Path
    entries: tuple[Entry, ...]
    data_start: int
    metadata: dict[str, str]


def _entry(path: Path, name: str, spec: object) -> Entry:
    what = f"header entry {name!r}"
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(path, what, "must be an object with exactly dtype, shape, data_offsets", found=spec)
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:  # a list or object is not even hashable
        raise CheckpointError(
            path, f"{what} dtype", "unknown or unsupported dtype", expected=sorted(DTYPES), found=dtype
        )
    if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
        raise CheckpointError(path, f"{what} shape", "must be a list of non-negative ints", found=shape)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise CheckpointError(path, f"{what} data_offsets", "must be [begin, end] ints", found=offsets)
    begin, end = offsets
    count = 1
    for s in shape:
        count *= s
    nbytes = count * DTYPES[dtype][0].itemsize
    if not 0 <= begin <= end or end - begin != nbytes:
        # Sizes quoted bounded: a shape of huge ints made an 800-character message, and a product beyond
        # 4,300 digits cannot even be formatted (ValueError).
        raise CheckpointError(
            path,
            f"{what} data_offsets",
            f"do not span {dtype} {quoted(shape)}",
            expected=f"end - begin = {nbytes}" if nbytes < 2**64 else "end - begin beyond any file's size",
            found=offsets,
        )
    return Entry(name, dtype, tuple(shape), begin, end)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _check_lists(path: Path, raw: bytes) -> None:
    """Refuse, before parsing, a header with more lists than a valid one can have: each list is a
    Python object of ~60 bytes from 2 bytes of JSON, so a 99 MB header of empty lists took 2.8 GB
    and 15 s to parse only to be refused. A valid header's lists are each entry's shape and
    data_offsets, and each entry is an object: at most 2 lists per object (counted outside strings;
    one more lets a header that is a list be refused as not an object)."""
    structure = _JSON_STRING.sub(b'""', raw)
    lists, objects = structure.count(b"["), structure.count(b"{")
    if lists > 2 * objects + 1:
        raise CheckpointError(
            path,
            "safetensors header",
            "more lists than tensor entries can hold",
            expected=f"at most 2 per object ({objects:,} objects)",
            found=f"{lists:,} lists",
        )


def read_header(reader: BoundedReader) -> SafetensorsFile:
    """The checked header of the file `reader` is open on."""
    path = reader.path
    (n,) = struct.unpack("<Q", reader.read(8, "safetensors header size"))
    if n > min(MAX_HEADER_BYTES, reader.size - 8):
        raise CheckpointError(
            path,
            "safetensors header size",
            "larger than the file (or than the 100 MB limit)",
            expected=f"<= {min(MAX_HEADER_BYTES, reader.size - 8):,} bytes",
            found=f"{n:,} bytes",
        )
    raw = reader.read(n, "safetensors header")
    _check_lists(path, raw)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(path, "safetensors header", f"not valid UTF-8 JSON: {e}") from None
    except RecursionError:  # the parser recurses per level of nesting; a valid header has three
        raise CheckpointError(path, "safetensors header", "JSON nested too deeply to parse") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, "safetensors header", "must be a JSON object", found=type(header).__name__)
    metadata = header.pop("__metadata__", None) or {}
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise CheckpointError(path, "safetensors __metadata__", "must map strings to strings", found=metadata)
    entries = sorted((_entry(path, name, spec) for name, spec in header.items()), key=lambda e: (e.begin, e.end))
    data_size = reader.size - 8 - n
    offset = 0
    for entry in entries:
        if entry.begin != offset:
            problem = "overlaps the tensor before it" if entry.begin < offset else "leaves a gap before it"
            raise CheckpointError(
                path, f"tensor {entry.name} data_offsets", problem, expected=f"begin {offset}", found=entry.begin
            )
        offset = entry.end
    if offset != data_size:
        problem = "the file is truncated" if offset > data_size else "the file has bytes no tensor covers"
        raise CheckpointError(
            path,
            "safetensors data",
            f"tensors do not tile the data: {problem}",
            expected=f"{offset:,} data bytes",
            found=f"{data_size:,} data bytes",
        )
    return SafetensorsFile(path, tuple(entries), 8 + n, metadata)


def read_tensor(reader: BoundedReader, file: SafetensorsFile, entry: Entry) -> np.ndarray:
    """One tensor, converted to float32 (BF16 and F16 exactly); non-float dtypes are returned as stored."""
    reader.handle.seek(file.data_start + entry.begin)
    return as_float32(entry, reader.array(DTYPES[entry.dtype][0], entry.shape, f"tensor {entry.name}"))


def map_tensor(file: SafetensorsFile, entry: Entry) -> np.ndarray:
    """One tensor mapped from the file and converted as `read_tensor` converts it (F32: no copy)."""
    return as_float32(entry, map_array(file.path, file.data_start + entry.begin, DTYPES[entry.dtype][0], entry.shape))


def as_float32(entry: Entry, stored: np.ndarray) -> np.ndarray:
    """A tensor's stored values as float32 (BF16 and F16 exactly); non-float dtypes as stored."""
    if entry.dtype == "BF16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    if DTYPES[entry.dtype][1] is None:
        return stored
    return stored.astype(np.float32, copy=False)


def byte_range(file: SafetensorsFile, entry: Entry) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes in the file."""
    return file.data_start + entry.begin, entry.end - entry.begin


def read_safetensors(path: Path) -> tuple[SafetensorsFile, dict[str, np.ndarray]]:
    """The header and every tensor of a file (float tensors as float32)."""
    with open_bounded(path) as reader:
        file = read_header(reader)
        return file, {e.name: read_tensor(reader, file, e) for e in file.entries}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write tensors with the `safetensors` library, all or nothing (straight from the arrays: no copy)."""
    from safetensors.numpy import save_file

    with atomic_path(path) as tmp:
        save_file({name: np.ascontiguousarray(t) for name, t in tensors.items()}, tmp, metadata=metadata)
