"""A `tokenizer.bin` made for one prompt, so that any prompt of token ids passes through run.c exactly.

run.c encodes its prompt string by looking up each byte as a one-byte piece, then merging the
adjacent pair with the best score while their concatenation is itself a piece; it prints each
token's piece (without a leading space after token 1). With a fixed vocabulary some id sequences
cannot survive that (any multi-byte piece is reachable by merges), so the suite makes a vocabulary
per prompt:

- each distinct prompt id gets its own one-byte piece from ALPHABET (no NUL, which ends a C string;
  no space, which run.c strips after token 1; not the marker);
- every other id gets MARKER followed by a fixed-width code of non-NUL bytes.

No piece is the concatenation of two prompt bytes (every multi-byte piece starts with MARKER), so the
prompt is never merged; and the printed output parses uniquely (MARKER opens a fixed-width piece, any
other byte is a one-byte piece). Every id has a distinct piece, so any generated id can be read back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from verifier.formats.llama2c_tokenizer import Tokenizer
from verifier.plugin.interface import Unsupported

MARKER = 0xFF
ALPHABET = bytes(b for b in range(1, 0xFF) if b != ord(" "))
_DIGITS = 255  # code digits are the bytes 1..255


class PromptTooVaried(Unsupported):
    """A prompt with more distinct ids than there are one-byte pieces (len(ALPHABET)): a limit, not a failure."""


def code_width(vocab_size: int) -> int:
    """Digits (base 255) needed to give every id a distinct code."""
    width = 1
    while _DIGITS**width < vocab_size:
        width += 1
    return width


@functools.cache
def marker_pieces(vocab_size: int) -> tuple[bytes, ...]:
    """MARKER + the base-255 code (digits 1..255, least significant first) of every id."""
    width = code_width(vocab_size)
    pieces = []
    for token in range(vocab_size):
        digits = []
        for _ in range(width):
            token, digit = divmod(token, _DIGITS)
            digits.append(digit + 1)
        pieces.append(bytes([MARKER, *digits]))
    return tuple(pieces)


@dataclass(frozen=True)
class PromptVocabulary:
    """Pieces for `vocab_size` ids in which the ids of one prompt have one-byte pieces."""

    vocab_size: int
    prompt_ids: tuple[int, ...]  # distinct, in order of first appearance

    @classmethod
    def for_prompt(cls, vocab_size: int, prompt: list[int]) -> PromptVocabulary:
        distinct = tuple(dict.fromkeys(prompt))
        if len(distinct) > len(ALPHABET):
            raise PromptTooVaried(
                f"the prompt has {len(distinct)} distinct token ids; run.c's byte-wise prompt encoding "
                f"can give at most {len(ALPHABET)} of them one-byte pieces"
            )
        return cls(vocab_size, distinct)

    @functools.cached_property
    def _byte_of(self) -> dict[int, int]:
        return {token: ALPHABET[i] for i, token in enumerate(self.prompt_ids)}

    def tokenizer(self) -> Tokenizer:
        """The `tokenizer.bin` contents: every id's piece, all scores 0 (nothing ever merges)."""
        pieces = list(marker_pieces(self.vocab_size))
        for token, byte in self._byte_of.items():
            pieces[token] = bytes([byte])
        return Tokenizer(tuple(pieces), (0.0,) * self.vocab_size, 1 + code_width(self.vocab_size))

    def encode(self, prompt: list[int]) -> bytes:
        """The prompt string run.c encodes back into exactly `prompt` (ids must be prompt ids)."""
        byte_of = self._byte_of
        return bytes(byte_of[token] for token in prompt)

    def decode(self, text: bytes, count: int, start: int = 0) -> tuple[list[int], int]:
        """`count` ids printed from `text[start:]`, and the offset after them; ValueError if malformed."""
        token_of = {ALPHABET[i]: token for i, token in enumerate(self.prompt_ids)}
        width = code_width(self.vocab_size)
        tokens: list[int] = []
        at = start
        for _ in range(count):
            if at >= len(text):
                raise ValueError(f"output ended after {len(tokens)} of {count} tokens")
            if text[at] == MARKER:
                code = text[at + 1 : at + 1 + width]
                token = sum((digit - 1) * _DIGITS**i for i, digit in enumerate(code))
                if len(code) != width or 0 in code or token >= self.vocab_size:
                    raise ValueError(f"malformed piece {text[at : at + 1 + width]!r} at byte {at}")
                at += 1 + width
            elif text[at] in token_of:
                token = token_of[text[at]]
                at += 1
            else:
                raise ValueError(f"byte {text[at]:#04x} at offset {at} is no piece of this vocabulary")
            tokens.append(token)
        return tokens, at
