"""The GGUF container read by the suite's own parser, in time and memory bounded by the file's size:
every count and length of the header (metadata and tensor infos) checked against the bytes left
before any loop, arrays of fixed-size items read at once, and metadata values checked by type.
Separate from `verifier.formats.gguf` because it knows the file format only, not which model a file
holds.

Not the `gguf` package's `GGUFReader`, which builds numpy objects per array item, per string and per
tensor, in Python: a 1 MB file holding one array of a million bytes took it 21 s and 740 MB (88 s on
a busy machine), a real vocabulary of 262,144 pieces and 500,000 merges 28 s and 1.5 GB. The package
still dequantizes and writes. `GGUFFile` gives what the suite read of the package's reader: `fields`
(with the package's `GGUF.version`, `GGUF.tensor_count` and `GGUF.kv_count`), each with `contents()`,
and `tensors`, each with its `name`, `tensor_type`, `shape` (fastest axis first) and `data` (mapped
from the file, shaped as the package shapes it)."""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path
from typing import Any, NamedTuple

import gguf
import numpy as np

from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import open_bounded

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 stored its counts as u32

# GGUF value types: a scalar type -> its struct (and numpy) code; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_UINT32, _UINT64, _STRING, _ARRAY = 4, 10, 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none
_DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT, where general.alignment is absent
# GGML's tensor types by number: (type, values a block, bytes a block).
_TENSOR_TYPES = {
    int(t): (t, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGMLQuantizationType if t in gguf.GGML_QUANT_SIZES
}
# Tensor types the package gives as arrays of their values; the others as bytes [..., bytes of a row].
_VALUE_DTYPES = {
    gguf.GGMLQuantizationType.F16: "f2",
    gguf.GGMLQuantizationType.F32: "f4",
    gguf.GGMLQuantizationType.F64: "f8",
    gguf.GGMLQuantizationType.I8: "i1",
    gguf.GGMLQuantizationType.I16: "i2",
    gguf.GGMLQuantizationType.I32: "i4",
    gguf.GGMLQuantizationType.I64: "i8",
}


class Field(NamedTuple):
    """One metadata value: its GGUF value type, its items' type if it is an array (else None), and the
    value as stored: a Python number or bool, bytes for a string, and for an array a numpy array of
    its fixed-size items, a list of bytes (strings) or a list of such arrays (arrays of arrays)."""

    name: str
    type: int
    item_type: int | None
    value: Any

    @property
    def n_items(self) -> int:
        """The number of items of an array (1 for a single value), without decoding them."""
        return len(self.value) if self.type == _ARRAY else 1

    def contents(self) -> Any:
        """The value as the `gguf` package's `ReaderField.contents()` gives it: a Python number or bool,
        a str, or a list of them (nested for an array of arrays, which the package flattens). A string
        that is not UTF-8 raises UnicodeDecodeError here, not when the file is read, as the package's does."""
        return _contents(self.value)


def _contents(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):  # of one type: an array's items are
        if value and isinstance(value[0], bytes):  # strings: a vocabulary, decoded without a call a piece
            return [item.decode("utf-8") for item in value]
        return [_contents(item) for item in value]
    return value


class Tensor(NamedTuple):
    """A tensor's info and its data, a read-only view of the file's mapping."""

    name: str
    tensor_type: gguf.GGMLQuantizationType
    shape: tuple[int, ...]  # GGUF's order: the fastest axis first
    data: np.ndarray  # numpy's order: values for F32, F16, ...; bytes [..., bytes of a row] for quantized types


class GGUFFile(NamedTuple):
    """A GGUF file's metadata (by key, in the file's order) and tensors."""

    fields: dict[str, Field]
    tensors: list[Tensor]


class _Parser:
    """Reads a GGUF header from `data` at `offset`, each read checked against the bytes left, so that
    no count the file claims is looped over or allocated for before it is known to fit.

    What a read is of is named by `what` and `part`, joined only for an error: a header is hundreds
    of thousands of reads, most of them in a file of a real model's vocabulary."""

    def __init__(self, path: Path, data: bytes | mmap.mmap, order: str, offset: int) -> None:
        self.path, self.data, self.order, self.offset, self.end = path, data, order, offset, len(data)
        self.layouts = {code: struct.Struct(order + code) for code in _SCALARS.values()}  # compiled once
        self.dtypes = {code: np.dtype(order + code) for code in _SCALARS.values()}

    def overrun(self, offset: int, n_bytes: int, what: str) -> CheckpointError:
        return CheckpointError(self.path, what, f"claims {n_bytes:,} bytes at offset {offset:,}; "
                               f"the file has {self.end - offset:,} left")  # fmt: skip

    def need(self, n_bytes: int, what: str, part: str = "") -> None:
        if n_bytes > self.end - self.offset:
            raise self.overrun(self.offset, n_bytes, what + part)

    def scalar(self, code: str, what: str, part: str = "") -> Any:
        layout = self.layouts[code]
        self.need(layout.size, what, part)
        (value,) = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return value

    def count(self, what: str, part: str, min_item_bytes: int) -> int:
        """A u64 count of items of at least `min_item_bytes` each, checked to fit before any loop."""
        n: int = self.scalar("Q", what, part)
        if n * min_item_bytes > self.end - self.offset:
            raise self.overrun(self.offset, n * min_item_bytes, f"{what}{part} ({n:,} items)")
        return n

    def string(self, what: str, part: str = "") -> bytes:
        n: int = self.scalar("Q", what, f"{part} length")
        self.need(n, what, part)
        self.offset += n
        return self.data[self.offset - n : self.offset]

    def text(self, what: str, part: str = "") -> str:
        """A key or tensor name: a string that must be UTF-8 (the package refused one that is not)."""
        raw = self.string(what, part)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(self.path, what + part, f"not valid UTF-8: {e.reason}", found=raw[:100]) from None

    def value(self, value_type: int, what: str) -> tuple[int | None, Any]:
        """A metadata value of `value_type`: (its items' type if it is an array, else None; the value)."""
        if value_type in _SCALARS:
            return None, self.scalar(_SCALARS[value_type], what)
        if value_type == _STRING:
            return None, self.string(what)
        if value_type == _ARRAY:
            return self.array(what, 0)
        raise CheckpointError(self.path, what, "an unknown value type", found=value_type)

    def array(self, what: str, depth: int) -> tuple[int, Any]:
        """(item type, items) of an array `depth` arrays deep: fixed-size items as one numpy array in the
        file's byte order (a copy: nothing refers to the file's mapping), strings as a list of bytes."""
        item_type: int = self.scalar("I", what, " item type")
        if item_type in _SCALARS:
            dtype = self.dtypes[_SCALARS[item_type]]
            n = self.count(what, " array", dtype.itemsize)
            self.offset += n * dtype.itemsize
            return item_type, np.frombuffer(self.data[self.offset - n * dtype.itemsize : self.offset], dtype)
        if item_type == _STRING:
            return item_type, self.strings(self.count(what, " array", 8), what)
        if item_type == _ARRAY and depth + 1 < _MAX_NESTING:
            n = self.count(what, " array", 4 + 8)  # each item an item type and a count
            return item_type, [self.array(what, depth + 1)[1] for _ in range(n)]
        raise CheckpointError(self.path, what, "an unknown value type (or arrays nested too deep)",
                              found=item_type)  # fmt: skip

    def strings(self, n: int, what: str) -> list[bytes]:
        """`n` strings: the loop of a vocabulary's pieces (262,144 for Gemma 3, ~500,000 merges), kept tight."""
        data, offset, end = self.data, self.offset, self.end
        length_at = self.layouts["Q"].unpack_from
        items: list[bytes] = []
        append = items.append
        for i in range(n):
            start = offset + 8
            if start > end:
                raise self.overrun(offset, 8, f"{what} item {i:,} length")
            (length,) = length_at(data, offset)
            offset = start + length
            if offset > end:
                raise self.overrun(start, length, f"{what} item {i:,}")
            append(data[start:offset])
        self.offset = offset
        return items


class _Header(NamedTuple):
    """What `_header` reads: all but the tensors' data, which is where the tensor infos say."""

    fields: dict[str, Field]
    tensors: list[tuple[str, tuple[int, ...], int, int]]  # name, dimensions, type, offset in the data
    data_start: int  # the byte the tensor data starts at
    order: str  # the file's byte order, as struct and numpy spell it


def _header(path: Path, data: bytes | mmap.mmap) -> _Header:
    """The header of the GGUF file `data`: version, counts, metadata and tensor infos, in the file's order."""
    if data[:4] != MAGIC:
        raise CheckpointError(path, "GGUF file", "cannot be parsed: not a GGUF file", expected=MAGIC,
                              found=bytes(data[:4]))  # fmt: skip
    parser = _Parser(path, data, "<", 4)
    version: int = parser.scalar("I", "GGUF version")
    if version & 0xFFFF == 0:  # the package's test of a file of the other byte order
        parser, version = _Parser(path, data, ">", 8), int.from_bytes(version.to_bytes(4, "little"), "big")
    if version not in VERSIONS:
        raise CheckpointError(path, "GGUF version", "not one this reader reads", expected=list(VERSIONS),
                              found=version)  # fmt: skip
    n_tensors = parser.count("GGUF tensor count", "", 8 + 4 + 4 + 8)  # name length, dims, type, offset
    n_kv = parser.count("GGUF metadata count", "", 8 + 4 + 1)  # key length, type, smallest value
    fields = {  # the package's own entries, which it lists with the file's
        "GGUF.version": Field("GGUF.version", _UINT32, None, version),
        "GGUF.tensor_count": Field("GGUF.tensor_count", _UINT64, None, n_tensors),
        "GGUF.kv_count": Field("GGUF.kv_count", _UINT64, None, n_kv),
    }
    for i in range(n_kv):
        key = parser.text(f"metadata key {i}")
        what = f"metadata {key!r}"  # quoted: a key may hold a newline
        value_type: int = parser.scalar("I", what, " type")
        item_type, value = parser.value(value_type, what)
        if key in fields:
            raise CheckpointError(path, what, "stored twice")
        fields[key] = Field(key, value_type, item_type, value)
    tensors = []
    info_layouts = [struct.Struct(f"{parser.order}{n}QIQ") for n in range(_MAX_DIMS + 1)]  # dims, type, offset
    for i in range(n_tensors):
        what = f"tensor {i}"
        name = parser.text(what, " name")
        n_dims: int = parser.scalar("I", what, " dimension count")
        if n_dims > _MAX_DIMS:
            raise CheckpointError(path, f"{what} dimension count", f"more than {_MAX_DIMS}", found=n_dims)
        layout = info_layouts[n_dims]
        parser.need(layout.size, what, " dimensions, type and offset")
        *dims, tensor_type, offset = layout.unpack_from(data, parser.offset)
        parser.offset += layout.size
        tensors.append((name, tuple(dims), tensor_type, offset))
    data_start = parser.offset + -parser.offset % _alignment(path, fields)
    return _Header(fields, tensors, data_start, parser.order)


def _alignment(path: Path, fields: dict[str, Field]) -> int:
    """The alignment of the tensor data: general.alignment, a u32 power of two, or GGUF's default."""
    field = fields.get("general.alignment")
    if field is None:
        return _DEFAULT_ALIGNMENT
    if field.type != _UINT32 or field.value == 0 or field.value & (field.value - 1):
        raise CheckpointError(path, "metadata general.alignment", "must be a uint32 power of two",
                              found=field.value)  # fmt: skip
    return int(field.value)


def _tensor(path: Path, mapped: np.ndarray, header: _Header, info: tuple[str, tuple[int, ...], int, int]) -> Tensor:
    """A tensor, its data (whole blocks, within the file) a view of `mapped`, the whole file."""
    name, dims, raw_type, offset = info
    if raw_type not in _TENSOR_TYPES:
        raise CheckpointError(path, f"tensor {name}", "stored in a type GGML does not have", found=raw_type)
    tensor_type, block, type_size = _TENSOR_TYPES[raw_type]
    if math.prod(d for d in dims if d) >= 2**63:  # numpy's sizes are int64, as ggml's are
        raise CheckpointError(path, f"tensor {name}", "more elements than int64 counts", found=list(dims))
    row = dims[0] if dims else 1
    if row % block:
        raise CheckpointError(path, f"tensor {name}", f"rows that are not whole {tensor_type.name} blocks",
                              expected=f"a multiple of {block}", found=row)  # fmt: skip
    begin = header.data_start + offset
    end = begin + math.prod(dims) // block * type_size
    if end > len(mapped):
        raise CheckpointError(path, "GGUF file", f"cannot be parsed: the data of tensor {name[:100]!r} runs past "
                              "the end of the file", expected=f"at least {end:,} bytes",
                              found=f"{len(mapped):,} bytes")  # fmt: skip
    numpy_shape = tuple(reversed(dims))
    if tensor_type in _VALUE_DTYPES:
        data = mapped[begin:end].view(np.dtype(header.order + _VALUE_DTYPES[tensor_type])).reshape(numpy_shape)
    else:
        data = mapped[begin:end].reshape(*numpy_shape[:-1], row // block * type_size)
    return Tensor(name, tensor_type, dims, data)


def open_reader(path: Path) -> GGUFFile:
    """The metadata and tensors of the GGUF file `path`, in time and memory a small multiple of its
    size; whatever does not fit or parse is a CheckpointError naming it."""
    with open_bounded(path) as reader:
        # Mapped, as the package mapped it: the header is parsed in place, into copies, and each
        # tensor's data is a view, which read_gguf copies as it dequantizes it. The mapping lives as
        # long as a view of it does.
        data = mmap.mmap(reader.handle.fileno(), 0, access=mmap.ACCESS_READ) if reader.size else b""
    header = _header(path, data)
    mapped = np.frombuffer(data, np.uint8)
    tensors: dict[str, Tensor] = {}
    for info in header.tensors:
        if info[0] in tensors:
            raise CheckpointError(path, f"tensor {info[0]}", "stored twice")
        tensors[info[0]] = _tensor(path, mapped, header, info)
    return GGUFFile(header.fields, list(tensors.values()))


def read_field(path: Path, reader: GGUFFile, key: str, default: Any = None) -> Any:
    """The metadata value of `key` as Python values (`Field.contents`); `default` where it is missing, if given."""
    field = reader.fields.get(key)
    if field is None:
        if default is not None:
            return default
        raise CheckpointError(path, f"metadata {key}", "missing")
    try:
        return field.contents()  # a string value is decoded here, not when the file is read
    except UnicodeDecodeError as e:
        raise CheckpointError(path, f"metadata {key}", f"a string that is not valid UTF-8: {e.reason}") from None


def int_field(path: Path, reader: GGUFFile, key: str, default: int | None = None) -> int:
    """An integer metadata value; another type (a string, an array, a float, a bool) is a CheckpointError."""
    value = read_field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CheckpointError(path, f"metadata {key}", f"must be an integer, not {type(value).__name__}", found=value)
    return int(value)


def float32_field(path: Path, reader: GGUFFile, key: str, default: float | None = None) -> float:
    """A float metadata value (GGUF stores float32), as the shortest decimal that is that float32
    (1e-05, not 9.99e-06); another type is a CheckpointError."""
    value = read_field(path, reader, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CheckpointError(path, f"metadata {key}", f"must be a number, not {type(value).__name__}", found=value)
    return float(str(np.float32(value)))
