"""llama2.c's tokenizer.bin: the real file round-trips byte for byte; malformed files raise CheckpointError."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verifier.formats import CheckpointError, Tokenizer, read_tokenizer, write_tokenizer
from verifier.formats.data import DATA_DIR_ENV, data_dir

REAL_SHA256 = "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361"


def real_tokenizer() -> Path:
    """Llama 2's tokenizer.bin: $VERIFIER_DATA_DIR's, else the packaged one; a skip if the variable has none."""
    path = data_dir() / "llama2c" / "tokenizer.bin"
    if not path.is_file():
        pytest.skip(f"llama2.c's tokenizer.bin not found at {path} (${DATA_DIR_ENV} points elsewhere)")
    return path


def test_the_real_llama2_tokenizer_reads_and_rewrites_byte_identical(tmp_path: Path) -> None:
    path = real_tokenizer()
    tok = read_tokenizer(path, vocab_size=32000)
    assert (tok.vocab_size, tok.max_token_length) == (32000, 27)
    assert tok.pieces[:3] == (b"<unk>", b"\n<s>\n", b"\n</s>\n")
    assert tok.pieces[259] == b"  "  # the first merge after the 3 specials and 256 byte pieces
    write_tokenizer(tmp_path / "t.bin", tok)
    assert hashlib.sha256((tmp_path / "t.bin").read_bytes()).hexdigest() == REAL_SHA256


pieces = st.binary(min_size=0, max_size=12).filter(lambda p: b"\0" not in p)
scores = st.floats(-1e6, 1e6, width=32)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(pieces, scores), min_size=1, max_size=40))
def test_written_tokenizers_read_back_equal(tmp_path: Path, entries: list[tuple[bytes, float]]) -> None:
    tok = Tokenizer(tuple(p for p, _ in entries), tuple(s for _, s in entries), max(1, *(len(p) for p, _ in entries)))
    write_tokenizer(tmp_path / "t.bin", tok)
    assert read_tokenizer(tmp_path / "t.bin", vocab_size=len(entries)) == tok


def _file(max_len: int, *entries: tuple[float, int, bytes]) -> bytes:
    return struct.pack("<i", max_len) + b"".join(struct.pack("<fi", s, n) + b for s, n, b in entries)


@pytest.mark.parametrize(
    ("data", "vocab_size", "message"),
    [
        (b"", None, "max_token_length: file is truncated"),
        (_file(0), None, "max_token_length: must be positive"),
        (_file(4, (0.0, 2, b"ab"))[:-1], None, "piece 0 bytes: file is truncated"),
        (_file(4, (0.0, 2, b"ab"))[:9], None, r"piece 0 \(score, length\): file is truncated"),
        (_file(4, (0.0, -1, b"")), None, "piece 0 length: out of range"),
        (_file(4, (0.0, 5, b"abcde")), None, "piece 0 length: out of range"),
        (_file(4, (float("nan"), 1, b"a")), None, "piece 0 score: must be finite"),
        (_file(4, (0.0, 2, b"a\0")), None, "NUL"),
        (_file(4, (0.0, 1, b"a")), 2, "piece count: does not match"),
    ],
    ids=[
        "empty",
        "zero max length",
        "cut in piece bytes",
        "cut in piece header",
        "negative length",
        "length beyond max",
        "NaN score",
        "NUL in piece",
        "count mismatch",
    ],
)
def test_malformed_tokenizers_raise_checkpoint_errors(
    tmp_path: Path, data: bytes, vocab_size: int | None, message: str
) -> None:
    path = tmp_path / "tokenizer.bin"
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=message):
        read_tokenizer(path, vocab_size=vocab_size)


def test_writer_refuses_pieces_run_c_would_misread(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="max_token_length"):
        write_tokenizer(tmp_path / "t.bin", Tokenizer((b"abc",), (0.0,), 2))
    with pytest.raises(CheckpointError, match="NUL"):
        write_tokenizer(tmp_path / "t.bin", Tokenizer((b"a\0",), (0.0,), 2))
    assert list(tmp_path.iterdir()) == []
