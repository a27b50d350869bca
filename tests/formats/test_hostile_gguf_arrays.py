"""GGUF headers whose counts fit the file but are large (issue 45): a metadata array of a million items,
a million strings, 300,000 arrays in an array, 200,000 keys, 100,000 tensors. Every reader of the
commands that read files ends on each with a result or one CheckpointError line, in a child process
limited to 30 s and to 256 MiB + 8 bytes a byte of the file (the fuzzer's limits, tests/fuzz/runner.py).
The `gguf` package's reader, which built numpy objects per item, took 21 s and 740 MB for the 1 MB
file of a million bytes, 58 s and 2.8 GB for 4 MB of them, 33 s and 1.6 GB for the million empty
strings. And the suite's reader gives what the package's gives on files of a real model's shape."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")

import gguf

from tests.formats.test_hostile_binary import ARRAY, LLAMA, STRING, U8, gguf_string, refused, value
from tests.fuzz.runner import Runner
from verifier.formats.gguf import read_gguf_config, write_gguf
from verifier.formats.gguf_container import open_reader
from verifier.model.presets import preset
from verifier.model.weights import init_weights

I32 = 5


def llama_file(
    path: Path, metadata: bytes = b"", n_metadata: int = 0, tensors: bytes = b"", n_tensors: int = 0
) -> Path:
    """The hand-written llama GGUF of test_hostile_binary (its metadata and a [10, 8] token embedding),
    with `n_metadata` more entries (`metadata`, each key, type, value) and `n_tensors` more tensor infos."""
    kv = b"".join(gguf_string(key) + struct.pack("<I", kind) + value(kind, v) for key, (kind, v) in LLAMA.items())
    embedding = gguf_string("token_embd.weight") + struct.pack("<I2QIQ", 2, 8, 10, 0, 0)
    header = struct.pack("<4sIQQ", b"GGUF", 3, 1 + n_tensors, len(LLAMA) + n_metadata)
    header += kv + metadata + embedding + tensors
    path.write_bytes(header + bytes(-len(header) % 32) + bytes(4 * 8 * 10))
    return path


def array(key: str, item_type: int, n: int, items: bytes) -> bytes:
    return gguf_string(key) + struct.pack("<IIQ", ARRAY, item_type, n) + items


def empty_u8_arrays(n: int) -> bytes:
    """`n` items of an array of arrays, each an empty array of u8 (item type, count)."""
    return struct.pack("<IQ", U8, 0) * n


# name -> (metadata, its entries, tensor infos, their number), made when a test runs: each file 1 to 8 MB
HOSTILE: dict[str, Callable[[], tuple[bytes, int, bytes, int]]] = {
    "1,000,000 u8": lambda: (array("a", U8, 10**6, bytes(10**6)), 1, b"", 0),
    "1,000,000 int32": lambda: (array("a", I32, 10**6, bytes(4 * 10**6)), 1, b"", 0),
    "1,000,000 empty strings": lambda: (array("a", STRING, 10**6, gguf_string("") * 10**6), 1, b"", 0),
    "300,000 arrays in an array": lambda: (array("a", ARRAY, 300_000, empty_u8_arrays(300_000)), 1, b"", 0),
    "200,000 keys": lambda: (
        b"".join(gguf_string(f"k{i:06x}") + struct.pack("<IB", U8, 0) for i in range(200_000)),
        200_000,
        b"",
        0,
    ),
    "100,000 tensors": lambda: (
        b"",
        0,
        b"".join(gguf_string(f"t{i:06x}") + struct.pack("<IQIQ", 1, 0, 0, 0) for i in range(100_000)),
        100_000,
    ),
}
ARRAY_ITEMS = {"1,000,000 u8": 10**6, "1,000,000 int32": 10**6, "1,000,000 empty strings": 10**6,
               "300,000 arrays in an array": 300_000}  # fmt: skip


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    with Runner() as started:
        yield started


# Each builds and reads a header of 3 to 6 MB: these two take 3 to 4 s here, the slow tier reads them.
SLOW_HEADERS = ("200,000 keys", "100,000 tensors")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_HEADERS else n for n in HOSTILE])
def test_a_large_header_that_fits_its_file_is_read_within_the_limits(name: str, runner: Runner, tmp_path: Path) -> None:
    metadata, n_metadata, tensors, n_tensors = HOSTILE[name]()
    path = llama_file(tmp_path / "m.gguf", metadata, n_metadata, tensors, n_tensors)
    result = runner.run(path, path.stat().st_size)
    assert not result.violations, "\n".join(result.violations)
    # The whole header was read: the config from its metadata (the model is refused for its missing tensors).
    assert (result.outcomes["checkpoint_config"], result.outcomes["load_checkpoint"]) == ("returned", "refused")
    reader = open_reader(path)
    assert len(reader.tensors) == 1 + n_tensors
    if name in ARRAY_ITEMS:
        assert reader.fields["a"].n_items == ARRAY_ITEMS[name]


def nested(depth: int) -> bytes:
    """An array of one array of ... (`depth` arrays in all) of one u8, 7."""
    inner = struct.pack("<IQB", U8, 1, 7)
    for _ in range(depth - 1):
        inner = struct.pack("<IQ", ARRAY, 1) + inner
    return gguf_string("a") + struct.pack("<I", ARRAY) + inner


def test_arrays_nest_at_most_4_deep(tmp_path: Path) -> None:
    path = llama_file(tmp_path / "m.gguf", nested(4), 1)
    assert open_reader(path).fields["a"].contents() == [[[[7]]]]
    path = llama_file(tmp_path / "m.gguf", nested(5), 1)
    refused(path, r"metadata 'a': an unknown value type \(or arrays nested too deep\) \(found 9\)", read_gguf_config)


def header_of(path: Path, *entries: bytes) -> Path:
    """A GGUF file of no tensors, whose metadata `entries` (key, type, value) end it."""
    path.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 0, len(entries)) + b"".join(entries))
    return path


U8_ENTRY = struct.pack("<IB", U8, 0)  # a metadata entry's type and value, after its key


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        (
            [array("a", STRING, 2, gguf_string("x") + struct.pack("<Q", 10**6))],
            r"metadata 'a' item 1: claims 1,000,000",
        ),
        ([array("a", STRING, 3, gguf_string("x") + gguf_string("abcdefg"))], r"metadata 'a' item 2 length: claims 8 "),
        ([array("a", 13, 1, bytes(12))], r"metadata 'a': an unknown value type .*\(found 13\)"),
        ([gguf_string("k") + U8_ENTRY] * 2, r"metadata 'k': stored twice"),
        ([struct.pack("<Q", 1) + b"\xff" + U8_ENTRY], r"metadata key 0: not valid UTF-8"),
    ],
    ids=[
        "a string past the end",
        "a string length past the end",
        "unknown item type",
        "a key twice",
        "a key not UTF-8",
    ],
)
def test_a_metadata_entry_that_cannot_be_read_is_named(entries: list[bytes], match: str, tmp_path: Path) -> None:
    refused(header_of(tmp_path / "m.gguf", *entries), match, read_gguf_config)


@pytest.mark.parametrize(
    ("name", "info", "match"),
    [
        ("token_embd.weight", struct.pack("<I2QIQ", 2, 8, 10, 0, 0), r"tensor token_embd\.weight: stored twice"),
        ("t", struct.pack("<IQIQ", 1, 8, 4, 0), r"tensor t: stored in a type GGML does not have \(found 4\)"),
        (
            "t",
            struct.pack("<IQIQ", 1, 8, 8, 0),
            r"tensor t: rows that are not whole Q8_0 blocks \(expected a multiple of 32",
        ),
        ("t", struct.pack("<I4QIQ", 4, *[2**16] * 4, 0, 0), r"tensor t: more elements than int64 counts"),
        (
            "t",
            struct.pack("<IQIQ", 1, 8, 0, 320),
            r"GGUF file: cannot be parsed: the data of tensor 't' runs past the end",
        ),
    ],
    ids=["a name twice", "a removed type (Q4_2)", "rows not whole blocks", "2**64 elements", "data past the end"],
)
def test_a_tensor_info_that_cannot_be_read_is_named(name: str, info: bytes, match: str, tmp_path: Path) -> None:
    refused(llama_file(tmp_path / "m.gguf", tensors=gguf_string(name) + info, n_tensors=1), match, read_gguf_config)


# ---------------------------------------------------------------------------------------------
# The suite's reader against the package's


def assert_read_as_the_package_reads(path: Path) -> None:
    """Every metadata entry (its type and contents) and tensor (type, shape, data) of `path` as
    `gguf.GGUFReader` gives it."""
    ours, theirs = open_reader(path), gguf.GGUFReader(path)
    assert list(ours.fields) == list(theirs.fields)
    for key, field in theirs.fields.items():
        mine = ours.fields[key]
        # The package takes an array's item type from its first item: an empty array has none.
        types = [mine.type] if mine.item_type is None or not mine.n_items else [mine.type, mine.item_type]
        assert types == field.types[:2], key
        got, expected = mine.contents(), field.contents()
        assert type(got) is type(expected) and got == expected, key
        if isinstance(expected, list):
            assert [type(x) for x in got] == [type(x) for x in expected], key
    assert [(t.name, t.tensor_type, list(t.shape)) for t in ours.tensors] == [
        (t.name, t.tensor_type, t.shape.tolist()) for t in theirs.tensors
    ]
    for tensor, their_tensor in zip(ours.tensors, theirs.tensors, strict=True):
        got_data, expected_data = tensor.data, their_tensor.data
        assert (got_data.dtype, got_data.shape) == (expected_data.dtype, expected_data.shape), tensor.name
        assert got_data.tobytes() == expected_data.tobytes(), tensor.name


@pytest.mark.parametrize(("family", "tensor_type"), [("llama2c-stories260K", "F32"), ("gpt2", "Q8_0")])
def test_write_gguf_s_files_read_as_the_package_reads_them(family: str, tensor_type: str, tmp_path: Path) -> None:
    config = preset(family).replace(vocab_size=96, n_ctx=32, n_layers=2, d_model=64, n_heads=4, n_kv_heads=4, d_ff=96)
    write_gguf(tmp_path / "m.gguf", config, init_weights(config, seed=5), tensor_type=tensor_type)
    assert_read_as_the_package_reads(tmp_path / "m.gguf")


def random_piece(rng: random.Random) -> str:
    """A vocabulary piece: empty, ASCII, Latin, CJK, SentencePiece's ▁, GPT-2's Ġ, an emoji."""
    return "".join(rng.choices("abcXYZ019 \n<>äöüßé漢字かな▁Ġ🙂", k=rng.randint(0, 12)))


# The little-endian file is of a real vocabulary's size; the big-endian one checks the byte order only.
@pytest.mark.parametrize(
    ("endianess", "n_pieces"), [(gguf.GGUFEndian.LITTLE, 50_000), (gguf.GGUFEndian.BIG, 1_000)], ids=["little", "big"]
)
def test_a_vocabulary_and_every_type_read_as_the_package_reads_them(
    endianess: gguf.GGUFEndian, n_pieces: int, tmp_path: Path
) -> None:
    rng, np_rng = random.Random(45), np.random.default_rng(45)
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "llama", endianess=endianess)
    writer.add_token_list([random_piece(rng) for _ in range(n_pieces)])
    writer.add_token_scores(np_rng.standard_normal(n_pieces).astype(np.float32).tolist())
    writer.add_token_types(np_rng.integers(1, 7, 1_000).tolist())
    writer.add_token_merges([f"{random_piece(rng)} {random_piece(rng)}" for _ in range(1_000)])
    writer.add_sliding_window_pattern([True, False, True])
    scalars = {"uint8": 255, "int8": -128, "uint16": 65535, "int16": -32768, "uint32": 2**32 - 1,
               "int32": -(2**31), "uint64": 2**64 - 1, "int64": -(2**63), "float32": 0.1, "float64": 0.1,
               "bool": True, "string": "ünï"}  # fmt: skip
    for kind, v in scalars.items():
        getattr(writer, f"add_{kind}")(f"test.{kind}", v)
        if kind != "string":
            item_type = gguf.GGUFValueType[kind.upper()]
            writer.add_key_value(f"test.{kind}s", [v, v, v], gguf.GGUFValueType.ARRAY, sub_type=item_type)
    writer.add_tensor("f32", np_rng.standard_normal((3, 64)).astype(np.float32))
    writer.add_tensor("f16", np_rng.standard_normal((2, 3, 8)).astype(np.float16))
    q8 = gguf.quants.quantize(np_rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("q8_0", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_read_as_the_package_reads(tmp_path / "m.gguf")
    assert open_reader(tmp_path / "m.gguf").fields["tokenizer.ggml.tokens"].n_items == n_pieces
