"""Hypothesis strategies for hostile files: a valid seed (tests/fuzz/seeds.py) with a few mutations.

Each mutation is a labelled strategy from a file's bytes to (label, new bytes):
- bytes: flip a bit, overwrite, insert, delete, truncate, append;
- integer fields: a length, count, type or size the file stores (the safetensors header length,
  llama2.c's header ints, GGUF's counts, string lengths, types and dimensions: any small
  little-endian int in the head of the file) set to 0, -1, 2**31, 2**61, 2**63, ...;
- JSON (config.json, a shard index, a safetensors header, re-framed with its true length so the
  reader gets past it): one value replaced by another type, a huge or negative number, NaN or
  Infinity, nesting 100,000 deep, a long string; a key deleted or added.
Mutations land near the start of a file more often than in its weights, where they are less
interesting.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.seeds import Seed

Mutated = tuple[str, bytes]  # (label, new bytes)
_HEAD = 4096  # bytes scanned for integer fields


@dataclass(frozen=True)
class FuzzInput:
    """A mutated seed: its files, the path the readers are given, and what was done to it."""

    format: str
    files: dict[str, bytes]
    target: str
    labels: tuple[str, ...]

    def write(self, folder: Path) -> Path:
        """Write the files into `folder`; the path to give the readers."""
        for name, data in self.files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        return folder / self.target

    def __repr__(self) -> str:  # the bytes are saved with a violation, not printed
        sizes = ", ".join(f"{name} ({len(data):,} bytes)" for name, data in self.files.items())
        return f"FuzzInput({self.format}: {self.target} of {sizes}; {'; '.join(self.labels) or 'unchanged'})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how Hypothesis shows a drawn value
        printer.text(repr(self))

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())


# ---------------------------------------------------------------------------------------------
# bytes


def _offsets(size: int) -> st.SearchStrategy[int]:
    """An offset in 0..size-1, most often in the first 64 bytes (headers)."""
    return st.one_of(st.integers(0, min(size, 64) - 1), st.integers(0, size - 1))


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> Mutated:
    size = len(data)
    if size == 0:
        return "append to empty", draw(st.binary(min_size=1, max_size=16))
    kind = draw(st.sampled_from(["flip", "overwrite", "insert", "delete", "truncate", "append"]))
    at = draw(_offsets(size))
    if kind == "flip":
        bit = draw(st.integers(0, 7))
        return "flip a bit", data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1 :]
    if kind == "overwrite":
        junk = draw(st.binary(min_size=1, max_size=8))
        return "overwrite bytes", data[:at] + junk + data[at + len(junk) :]
    if kind == "insert":
        return "insert bytes", data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
    if kind == "delete":
        return "delete bytes", data[:at] + data[at + draw(st.integers(1, 64)) :]
    if kind == "truncate":
        return "truncate", data[:at]
    return "append bytes", data + draw(st.binary(min_size=1, max_size=64))


# ---------------------------------------------------------------------------------------------
# integer fields

INTERESTING = (0, 1, 2, 3, 7, 255, 2**15, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**61, 2**62, 2**63 - 1, 2**63,
               2**64 - 1, -1, -2, -(2**31))  # fmt: skip


def int_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of every little-endian u32 / u64 in the file's head holding a small positive int:
    the lengths, counts, types, sizes and dimensions of every format here (and some weight bytes)."""
    head = data[:_HEAD]
    found = []
    for width, code in ((4, "<I"), (8, "<Q")):
        for at in range(len(head) - width + 1):
            if 0 < struct.unpack_from(code, head, at)[0] <= 2**24:
                found.append((at, width))
    return found


@st.composite
def int_field_mutations(draw: st.DrawFn, data: bytes) -> Mutated:
    fields = int_fields(data) or [(0, 4)]
    at, width = draw(st.sampled_from(fields))
    old = int.from_bytes(data[at : at + width], "little")
    new = draw(
        st.one_of(
            st.sampled_from(INTERESTING),
            st.sampled_from([old - 1, old + 1, 2 * old, old * 2**16, len(data), len(data) - at]),
            st.integers(-(2 ** (8 * width - 1)), 2 ** (8 * width) - 1),
        )
    )
    raw = (new % 2 ** (8 * width)).to_bytes(width, "little")
    stored = int.from_bytes(raw, "little")
    return f"set the u{8 * width} at {at} ({old}) to {stored}", data[:at] + raw + data[at + width :]


# ---------------------------------------------------------------------------------------------
# JSON


@dataclass(frozen=True)
class Deep:
    """A value nested `depth` levels deep in lists or objects, written without recursion."""

    depth: int
    kind: str  # "list" or "object"


def dumps(value: Any) -> str:
    """JSON as Python's json writes it (NaN and Infinity included), with `Deep` values spelled out."""
    if isinstance(value, Deep):
        if value.kind == "list":
            return "[" * value.depth + "1" + "]" * value.depth
        return '{"a": ' * value.depth + "1" + "}" * value.depth
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    return json.dumps(value)


Path_ = tuple[Any, ...]  # keys and indexes from the root


def json_paths(value: Any, limit: int = 2000) -> list[Path_]:
    """Paths to the nodes of `value`, root first, breadth first, at most `limit`."""
    paths: list[Path_] = [()]
    queue: list[tuple[Path_, Any]] = [((), value)]
    while queue and len(paths) < limit:
        path, node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            paths.append((*path, key))
            queue.append(((*path, key), child))
    return paths[:limit]


_ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**31, 2**63, 2**64, 10**19, 10**30, -(10**19), 10**400, 1e30, 1e308, -0.0, 5e-324,
    -1.5, math.nan, math.inf, -math.inf, "", "F32", "1e-5", "16", "llama", "gpt2", "x" * 100_000, "line\nbreak",
    [], {}, [1], [[]], {"a": 1}, [-1, 0], [2**63, 2**64], [10**300] * 16,
)  # fmt: skip


# Keys as a file may spell them: empty, 100 KB, with a line break, another entry's name, a path.
_ODD_KEYS = ("", "x" * 100_000, "a\nb", "__metadata__", "model.embed_tokens.weight", "../up", "weight_map")


def json_values(old: Any) -> st.SearchStrategy[tuple[str, Any]]:
    """(label, value) to put where `old` was: another type, an odd number, deep nesting, ..."""
    return st.one_of(
        st.sampled_from(_ODD_VALUES).map(lambda v: (f"{type(v).__name__} {dumps(v)[:20]}", v)),
        st.sampled_from([str(old), [old], {"value": old}, not old]).map(
            lambda v: (f"the old value as {type(v).__name__}", v)
        ),
        # Far below or far above Python's recursion limit (1,000): parsing a file nested close to it, to mutate
        # it again, would fail or not by the caller's stack depth, which makes the strategy inconsistent.
        st.builds(Deep, st.sampled_from([2, 100, 10_000, 100_000]), st.sampled_from(["list", "object"])).map(
            lambda d: (f"{d.kind} nested {d.depth} deep", d)
        ),
        st.integers().map(lambda v: ("an integer", v)),
        st.floats().map(lambda v: ("a float", v)),
        st.text(max_size=8).map(lambda v: ("a string", v)),
    )


def _replace(root: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return root


@st.composite
def json_mutations(draw: st.DrawFn, value: Any) -> tuple[str, Any]:
    """(label, mutated copy of the parsed JSON `value`)."""
    root = json.loads(json.dumps(value))  # a copy
    path = draw(st.sampled_from(json_paths(root)))
    where = "/".join(map(str, path)) or "the root"
    kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "rename"]))
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    if kind == "delete" and path:
        del parent[path[-1]]
        return f"JSON: delete {where}", root
    if kind == "rename" and path and isinstance(parent, dict):
        key = draw(st.one_of(st.sampled_from(_ODD_KEYS), st.text(max_size=8)))
        parent[key] = parent.pop(path[-1])
        return f"JSON: rename {where} to {key[:20]!r}", root
    node = parent[path[-1]] if path else root
    if kind == "add" and isinstance(node, dict | list):
        label, new = draw(json_values(None))
        if isinstance(node, dict):
            node[draw(st.sampled_from(["extra", "__metadata__", "dtype", "shape", "data_offsets"]))] = new
        else:
            node.insert(draw(st.integers(0, len(node))), new)
        return f"JSON: add {label} in {where}", root
    label, new = draw(json_values(node))
    return f"JSON: {where} = {label}", _replace(root, path, new)


@st.composite
def json_file_mutations(draw: st.DrawFn, data: bytes) -> Mutated:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # broken, or nested deep, by an earlier mutation
        return draw(byte_mutations(data))
    label, new = draw(json_mutations(value))
    return label, dumps(new).encode()


@st.composite
def safetensors_header_mutations(draw: st.DrawFn, data: bytes) -> Mutated:
    """The header's JSON mutated and the file re-framed with the new header's true length."""
    (length,) = struct.unpack_from("<Q", data) if len(data) >= 8 else (0,)
    try:
        value = json.loads(data[8 : 8 + length])
    except (ValueError, RecursionError):
        return draw(byte_mutations(data))
    label, new = draw(json_mutations(value))
    header = dumps(new).encode()
    return f"safetensors header {label}", struct.pack("<Q", len(header)) + header + data[8 + length :]


def file_mutations(name: str, data: bytes) -> st.SearchStrategy[Mutated]:
    """The mutations that fit the file `name`."""
    choices: list[st.SearchStrategy[Mutated]] = [byte_mutations(data)]
    if name.endswith(".json"):
        choices += [json_file_mutations(data)] * 3
    else:
        choices.append(int_field_mutations(data))
    if name.endswith(".safetensors"):
        choices += [safetensors_header_mutations(data)] * 2
    return st.one_of(choices)


@st.composite
def fuzz_inputs(draw: st.DrawFn, seeds: tuple[Seed, ...]) -> FuzzInput:
    """A seed of the format with 1 to 3 mutations (a file of a folder other than the target removed, now and then)."""
    seed = draw(st.sampled_from(seeds))
    target = draw(st.sampled_from(seed.targets))
    files = dict(seed.files)
    labels = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(files)))
        if name != target and len(files) > 1 and draw(st.integers(0, 19)) == 0:
            del files[name]
            labels.append(f"{name}: removed")
            continue
        label, files[name] = draw(file_mutations(name, files[name]))
        labels.append(f"{name}: {label}")
    return FuzzInput(seed.format, files, target, tuple(labels))
