"""llama2.c's `tokenizer.bin`: int32 max_token_length, then per piece float32 score, int32 length, bytes.

The file does not store the number of pieces (run.c reads as many as the model's vocab_size), so
the reader reads to the end of the file, and checks the count when the caller knows it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import atomic_write, open_bounded

_INT = struct.Struct("<i")
_PIECE = struct.Struct("<fi")


@dataclass(frozen=True)
class Tokenizer:
    """The pieces of a vocabulary (bytes, index = token id), their merge scores, and the longest length.

    `max_token_length` must be at least the longest piece: run.c sizes its merge buffer from it.
    """

    pieces: tuple[bytes, ...]
    scores: tuple[float, ...]
    max_token_length: int

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)


def read_tokenizer(path: str | Path, vocab_size: int | None = None) -> Tokenizer:
    """Every piece of a `tokenizer.bin`; with `vocab_size`, the count must match it."""
    path = Path(path)
    pieces: list[bytes] = []
    scores: list[float] = []
    with open_bounded(path) as reader:
        (max_len,) = _INT.unpack(reader.read(_INT.size, "header field max_token_length"))
        if max_len <= 0:
            raise CheckpointError(path, "header field max_token_length", "must be positive", found=max_len)
        while reader.offset < reader.size:
            what = f"piece {len(pieces)}"
            score, length = _PIECE.unpack(reader.read(_PIECE.size, f"{what} (score, length)"))
            if not 0 <= length <= max_len:
                raise CheckpointError(
                    path,
                    f"{what} length",
                    "out of range (run.c's merge buffer holds max_token_length bytes)",
                    expected=f"0..{max_len}",
                    found=length,
                )
            if not np.isfinite(score):
                raise CheckpointError(path, f"{what} score", "must be finite", found=score)
            piece = reader.read(length, f"{what} bytes")
            if b"\0" in piece:
                raise CheckpointError(
                    path, f"{what} bytes", "hold a NUL byte, which run.c's C strings cut off", found=piece
                )
            pieces.append(piece)
            scores.append(score)
    if vocab_size is not None and len(pieces) != vocab_size:
        raise CheckpointError(
            path, "piece count", "does not match the model's vocab_size", expected=vocab_size, found=len(pieces)
        )
    return Tokenizer(tuple(pieces), tuple(scores), max_len)


def write_tokenizer(path: str | Path, tokenizer: Tokenizer) -> None:
    """Write a `tokenizer.bin` (all or nothing); scores are stored as float32."""
    path = Path(path)
    if len(tokenizer.pieces) != len(tokenizer.scores):
        raise CheckpointError(
            path, "tokenizer", "needs one score per piece", expected=len(tokenizer.pieces), found=len(tokenizer.scores)
        )
    longest = max((len(p) for p in tokenizer.pieces), default=0)
    if tokenizer.max_token_length < max(longest, 1):
        raise CheckpointError(
            path,
            "max_token_length",
            "must be positive and cover the longest piece",
            expected=f">= {max(longest, 1)}",
            found=tokenizer.max_token_length,
        )
    for i, piece in enumerate(tokenizer.pieces):
        if b"\0" in piece:
            raise CheckpointError(path, f"piece {i}", "holds a NUL byte, which run.c's C strings cut off", found=piece)
    chunks = [_INT.pack(tokenizer.max_token_length)]
    for piece, score in zip(tokenizer.pieces, tokenizer.scores, strict=True):
        chunks.append(_PIECE.pack(score, len(piece)))
        chunks.append(piece)
    with atomic_write(path) as handle:
        handle.write(b"".join(chunks))
