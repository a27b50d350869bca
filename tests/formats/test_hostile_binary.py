"""Hostile safetensors and GGUF files (issue 25), each written by hand, byte by byte: every reader
raises a one-line CheckpointError of bounded length naming the field, never another exception, a
loop sized by a count the file claims, or a message that echoes a huge value."""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from verifier.formats import CheckpointError, load_checkpoint
from verifier.formats import safetensors_file as safetensors_module
from verifier.formats.errors import MAX_QUOTED
from verifier.formats.safetensors_file import read_safetensors

# The GGUF reader is the gguf package behind these checks (the gguf extra); the README's test command has no extra.
NEEDS_GGUF = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None,
    reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')",
)

MAX_MESSAGE = 2 * MAX_QUOTED + 400  # path, field, problem and two quoted values


def refused(path: Path, match: str, read: Callable[[Path], object] = load_checkpoint) -> str:
    """The error of `read(path)`, checked to be one bounded line matching `match`."""
    with pytest.raises(CheckpointError, match=match) as caught:
        read(path)
    message = str(caught.value)
    assert "\n" not in message and len(message) < MAX_MESSAGE, message[:1000]
    return message


# ---------------------------------------------------------------------------------------------
# safetensors (the file alone: a checkpoint also needs a config.json)


def safetensors_file(path: Path, header: bytes) -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def test_a_dtype_that_is_a_list_is_a_checkpoint_error(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = safetensors_file(tmp_path / "m.safetensors", header)
    refused(path, r'header entry "w": not of the form of a safetensors header', read_safetensors)


def test_a_header_nested_100000_deep_is_a_checkpoint_error(tmp_path: Path) -> None:
    header = b'{"w": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}"
    path = safetensors_file(tmp_path / "m.safetensors", header)
    refused(path, r'header entry "w": not of the form of a safetensors header', read_safetensors)


def test_a_header_of_empty_lists_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The issue's 99 MB header of empty lists, smaller: parsed, it took 2.8 GB before being refused.
    header = b'{"w": [' + b"[]," * 300_000 + b"[]]}"
    path = safetensors_file(tmp_path / "m.safetensors", header)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header was parsed")

    monkeypatch.setattr(safetensors_module, "parse_json", no_parse)
    refused(path, r'header entry "w": not of the form of a safetensors header', read_safetensors)


def test_a_huge_value_is_quoted_by_a_bounded_prefix(tmp_path: Path) -> None:
    # The message quoted the whole value (132 MB for the issue's header).
    header = json.dumps({"w": {"dtype": "F32" * 100_000, "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = safetensors_file(tmp_path / "m.safetensors", header)
    refused(
        path, r"dtype: unknown or unsupported dtype .*found F32F32.*\.\.\. \(300,000 characters\)", read_safetensors
    )


def test_a_shape_of_huge_sizes_is_refused_without_multiplying_it_out(tmp_path: Path) -> None:
    # 1,000 sizes of 4,000 digits: the product took 8 s for 500 of them, minutes for 2,000, and then
    # formatting it for the message raised ValueError (more than 4,300 digits), not CheckpointError.
    shape = "[" + ",".join(["9" * 4000] * 1000) + "]"
    header = ('{"w": {"dtype": "F32", "shape": ' + shape + ', "data_offsets": [0, 4]}}').encode()
    path = safetensors_file(tmp_path / "m.safetensors", header)
    path.write_bytes(path.read_bytes() + b"\0" * 4)  # the 4 data bytes its offsets claim
    words = r"header entry 'w' data_offsets: do not span F32 .*expected end - begin = more than 4"
    refused(path, words, read_safetensors)


def test_a_header_of_too_many_tensors_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A header of the right form is parsed at ~800 bytes an entry: 1.8 million empty tensors in 99 MB took
    # 1.45 GB. Here one more than the limit, each empty (0 bytes of data), so the file is otherwise valid.
    n = safetensors_module.MAX_TENSORS + 1
    entries = ",".join(f'"{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(n))
    path = safetensors_file(tmp_path / "m.safetensors", ("{" + entries + "}").encode())

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header was parsed")

    monkeypatch.setattr(safetensors_module, "parse_json", no_parse)
    refused(path, r"safetensors header: too many tensors \(expected at most 262,144, found 262,145\)", read_safetensors)


# ---------------------------------------------------------------------------------------------
# GGUF, laid out as the format's spec gives it: magic, version, tensor count, metadata count,
# metadata (key, type, value), tensor infos (name, dims, type, offset), data aligned to 32 bytes.

U8, U32, F32, STRING, ARRAY = 0, 4, 6, 8, 9


def gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def value(kind: int, v: object) -> bytes:
    if kind == U32:
        return struct.pack("<I", v)
    if kind == F32:
        return struct.pack("<f", v)
    if kind == STRING:
        return gguf_string(str(v))
    assert isinstance(v, list)  # an array of u32
    return struct.pack("<IQ", U32, len(v)) + b"".join(struct.pack("<I", x) for x in v)


def gguf_file(path: Path, metadata: dict[str, tuple[int, object]], tensors: dict[str, list[int]]) -> Path:
    """A GGUF v3 file with `metadata` (key -> (type, value)) and F32 `tensors` (name -> dims, fastest first)."""
    out = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(metadata))
    for key, (kind, v) in metadata.items():
        out += gguf_string(key) + struct.pack("<I", kind) + value(kind, v)
    offset, data = 0, b""
    for name, dims in tensors.items():
        out += gguf_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, 0, offset)
        size = 4
        for d in dims:
            size *= d
        data += bytes(size) + bytes(-size % 32)
        offset += size + (-size % 32)
    path.write_bytes(out + bytes(-len(out) % 32) + data)
    return path


LLAMA = {
    "general.architecture": (STRING, "llama"),
    "llama.attention.head_count": (U32, 2),
    "llama.context_length": (U32, 16),
    "llama.embedding_length": (U32, 8),
    "llama.block_count": (U32, 1),
    "llama.feed_forward_length": (U32, 16),
    "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
}
EMBEDDING = {"token_embd.weight": [8, 10]}


@NEEDS_GGUF
def test_the_hand_written_gguf_reaches_the_tensor_checks(tmp_path: Path) -> None:
    # The baseline the cases below vary: only the missing layer tensors are wrong.
    path = gguf_file(tmp_path / "m.gguf", LLAMA, EMBEDDING)
    refused(path, r"tensor output_norm.weight: missing")


@NEEDS_GGUF
@pytest.mark.parametrize("item_type", [U8, STRING])
def test_a_49_byte_gguf_claiming_2_61_array_items_is_refused_at_once(item_type: int, tmp_path: Path) -> None:
    # The gguf package loops once per claimed item: u8 items never ended, with memory growing.
    path = tmp_path / "m.gguf"
    path.write_bytes(
        struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + gguf_string("a") + struct.pack("<IIQ", ARRAY, item_type, 2**61)
    )
    assert path.stat().st_size == 49
    refused(path, r"metadata 'a' array \(2,305,843,009,213,693,952 items\): claims .* bytes")


@NEEDS_GGUF
@pytest.mark.parametrize(
    ("key", "stored", "problem"),
    [
        ("llama.context_length", (STRING, "16"), "must be an integer, not str"),
        ("llama.context_length", (ARRAY, [16, 16]), "must be an integer, not list"),
        ("llama.attention.layer_norm_rms_epsilon", (STRING, "1e-5"), "must be a number, not str"),
    ],
)
def test_metadata_of_another_type_is_a_checkpoint_error(
    key: str, stored: tuple[int, object], problem: str, tmp_path: Path
) -> None:
    path = gguf_file(tmp_path / "m.gguf", {**LLAMA, key: stored}, EMBEDDING)
    refused(path, rf"metadata {key}: {problem}")


@NEEDS_GGUF
def test_a_1d_token_embedding_is_a_checkpoint_error(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "m.gguf", LLAMA, {"token_embd.weight": [8]})
    refused(path, r"tensor token_embd.weight: must be 2-D")


@NEEDS_GGUF
@pytest.mark.parametrize(
    ("claim", "match"),
    [
        (struct.pack("<4sIQQ", b"GGUF", 3, 0, 2**60), r"GGUF metadata count \(1,152,921,504,606,846,976 items\)"),
        (struct.pack("<4sIQQ", b"GGUF", 3, 2**60, 0), r"GGUF tensor count \(1,152,921,504,606,846,976 items\)"),
        (struct.pack("<4sIQQQ", b"GGUF", 3, 0, 1, 2**62), r"metadata key 0: claims 4,611,686,018,427,387,904 bytes"),
        (
            struct.pack("<4sIQQ", b"GGUF", 3, 1, 0) + gguf_string("t") + struct.pack("<I", 2**31),
            r"tensor 0 dimension count: more than 4",
        ),
    ],
    ids=["metadata count", "tensor count", "key length", "dimension count"],
)
def test_gguf_counts_and_lengths_are_checked_against_the_file(claim: bytes, match: str, tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(claim + bytes(64))
    refused(path, match)
