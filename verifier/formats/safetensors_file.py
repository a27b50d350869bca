"""The safetensors layout, read by the suite itself so that every header is checked before use.

A file is: u64 little-endian N, an N-byte JSON header {name: {dtype, shape, data_offsets: [begin,
end]}, "__metadata__": {str: str}}, then the data, tensors packed back to back. The header is
hostile until proven otherwise: its size and its form (before it is parsed), every dtype, shape and
offset are checked against the file size, and tensors must tile the data exactly, before any
tensor is read.
Writing uses the `safetensors` library (the format's own writer).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verifier.formats.errors import CheckpointError, quoted
from verifier.formats.fileio import BoundedReader, atomic_path, open_bounded, read_array
from verifier.formats.jsonio import parse_json

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
# Tensors in one file: published checkpoints hold at most a few tens of thousands (a 256-expert MoE's
# shard, ~50,000); parsed, each entry costs ~800 bytes whatever its size in the header, so this bounds
# the parse of a header of the right form to ~200 MB (1.8 million empty tensors in 99 MB took 1.45 GB).
MAX_TENSORS = 2**18
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
    nbytes = _nbytes(shape, DTYPES[dtype][0].itemsize, end - begin)
    if not 0 <= begin <= end or nbytes != end - begin:
        raise CheckpointError(
            path,
            f"{what} data_offsets",
            f"do not span {dtype} {quoted(shape)}",
            expected="end - begin = " + (f"{nbytes:,}" if nbytes is not None else f"more than {end - begin:,}"),
            found=offsets,
        )
    return Entry(name, dtype, tuple(shape), begin, end)


def _nbytes(shape: list[int], itemsize: int, limit: int) -> int | None:
    """The bytes of a tensor of `shape`, or None once they exceed `limit`: the product is not carried
    on, as a hostile shape of thousands of 4,000-digit sizes would take minutes to multiply out (and
    its product has too many digits to print)."""
    if 0 in shape:
        return 0
    nbytes = itemsize
    for s in shape:
        nbytes *= s
        if nbytes > max(limit, 0):
            return None
    return nbytes


# The grammar of a header, checked before it is parsed: json.loads builds a Python object of 50 to
# 60 bytes from as little as 2 bytes of JSON (`[]`, `{}`, `"ab"`), so a 99 MB header of empty
# lists, empty objects or short strings took 2 to 3.5 GB and 5 to 15 s to parse only to be refused.
# A header is one object of entries, each an object of exactly the members dtype (a string), shape
# and data_offsets (lists of integers), and "__metadata__", an object of strings. Parsed, such a
# header costs up to about 15 times its size, as a valid one does (1.45 GB for 99 MB of empty tensors).
# Possessive quantifiers (`*+`) never backtrack, so the match takes time linear in the header's size.
_WS = rb"[ \t\n\r]*+"
_STR = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_INTS = rb"\[" + _WS + rb"(?:-?[0-9]++" + _WS + rb"(?:," + _WS + rb"-?[0-9]++" + _WS + rb")*+)?\]"
_MEMBER = rb'(?:"dtype"' + _WS + b":" + _WS + _STR + rb'|"(?:shape|data_offsets)"' + _WS + b":" + _WS + _INTS + b")"
_ENTRY = rb"\{" + _WS + _MEMBER + _WS + rb"(?:," + _WS + _MEMBER + _WS + rb"){2}\}"
_PAIR = _STR + _WS + b":" + _WS + _STR
_METADATA = rb"\{" + _WS + rb"(?:" + _PAIR + _WS + rb"(?:," + _WS + _PAIR + _WS + rb")*+)?\}"
_TOP_MEMBER = rb'(?:"__metadata__"' + _WS + b":" + _WS + _METADATA + b"|" + _STR + _WS + b":" + _WS + _ENTRY + b")"
_HEADER = re.compile(
    _WS + rb"\{" + _WS + rb"(?:" + _TOP_MEMBER + _WS + rb"(?:," + _WS + _TOP_MEMBER + _WS + rb")*+)?\}" + _WS
)
_OPEN, _NEXT_MEMBER, _KEY = re.compile(_WS + rb"\{" + _WS), re.compile(_WS + b"," + _WS), re.compile(_STR)
_TOP_MEMBER_RE = re.compile(_TOP_MEMBER)
_SHAPE_OF_A_HEADER = "{name: {dtype: string, shape: [ints], data_offsets: [ints]}, __metadata__: {string: string}}"


def _check_grammar(path: Path, raw: bytes) -> None:
    """Refuse, before parsing, a header that is not of the form a safetensors header has, naming the
    first top-level member that breaks it."""
    if _HEADER.fullmatch(raw):
        return
    start = _OPEN.match(raw)
    if start is None:
        raise CheckpointError(
            path, "safetensors header", "must be a JSON object", found=raw[:40].decode("utf-8", "replace")
        )
    offset = start.end()
    while member := _TOP_MEMBER_RE.match(raw, offset):  # past the members that fit
        comma = _NEXT_MEMBER.match(raw, member.end())
        if comma is None:  # the last member fits: what follows it does not (e.g. bytes after the object)
            offset = member.end()
            break
        offset = comma.end()
    key = _KEY.match(raw, offset)
    where = f"entry {quoted(key.group().decode('utf-8', 'replace'))}" if key else f"byte {8 + offset:,}"
    raise CheckpointError(
        path,
        f"safetensors header {where}",
        "not of the form of a safetensors header (checked before it is parsed)",
        expected=_SHAPE_OF_A_HEADER,
        found=raw[offset : offset + 60].decode("utf-8", "replace"),
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
    _check_grammar(path, raw)
    # Each entry has exactly one data_offsets member (the grammar above): counted without parsing.
    if (n_tensors := raw.count(b'"data_offsets"')) > MAX_TENSORS:
        raise CheckpointError(
            path, "safetensors header", "too many tensors", expected=f"at most {MAX_TENSORS:,}", found=f"{n_tensors:,}"
        )
    header = parse_json(path, "safetensors header", raw)
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


def load_tensor(file: SafetensorsFile, entry: Entry) -> np.ndarray:
    """One tensor read from the file by name (no reader kept open), converted as `read_tensor` converts it."""
    stored = read_array(
        file.path, file.data_start + entry.begin, DTYPES[entry.dtype][0], entry.shape, f"tensor {entry.name}"
    )
    return as_float32(entry, stored)


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
