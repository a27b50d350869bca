"""Prompts as text for llama2.c's current `run.c` (and programs that follow its rules), and its output read back.

run.c (llama2.c at 350e04f) encodes a prompt string as: token 1 (BOS), then, for a non-empty string,
the id of the piece " " (sentencepiece's dummy prefix), then each UTF-8 code point's piece, merged
pairwise by score. It prints the piece of every token after the first (a leading space is stripped
after BOS, one-byte pieces that are neither printable nor whitespace are not printed), stops as soon
as the next token is 1, and ends with a newline.

To pass any prompt of ids [a, b, c, ...] through that exactly, the suite renames ids so that `a` is
1 (swapping two ids' rows renames tokens without changing the function), and writes a vocabulary
made for the prompt:

- `b` (run.c's dummy prefix) gets the piece " ";
- every other distinct prompt id gets its own printable one-byte piece from ALPHABET (no space);
- every other id gets MARKER followed by a fixed-width code of non-NUL bytes.

No piece is the concatenation of two others' bytes (every multi-byte piece starts with MARKER), so
nothing merges; printed output parses uniquely. What run.c cannot take is declared, not failed:
a prompt of exactly 2 ids (a non-empty string always adds the dummy prefix), a prompt whose first
id comes back later (run.c stops at BOS), more distinct ids than one-byte pieces, and a
continuation that reaches the first id (run.c stops there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from verifier.formats.llama2c_tokenizer import Tokenizer
from verifier.plugin.interface import Unsupported

BOS = 1
MARKER = 0xFF
DUMMY_PREFIX = b" "
ALPHABET = bytes(range(0x21, 0x7F))  # printable ASCII without space: run.c prints these as they are
_DIGITS = 255  # code digits are the bytes 1..255


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


def renaming(first: int) -> dict[int, int]:
    """The id exchange that makes `first` run.c's BOS (an involution: the same map both ways)."""
    return {BOS: first, first: BOS}


@dataclass(frozen=True)
class TextPrompt:
    """One prompt (already renamed, so that it starts with BOS) as run.c's text and vocabulary."""

    vocab_size: int
    prompt: tuple[int, ...]

    @classmethod
    def for_prompt(cls, vocab_size: int, prompt: list[int]) -> TextPrompt:
        """Raises Unsupported for a prompt run.c cannot take (see the module docstring)."""
        if not prompt or prompt[0] != BOS:
            raise ValueError(f"the renamed prompt must start with {BOS}, found {prompt[:1]}")
        rest = prompt[1:]
        if len(rest) == 1:
            raise Unsupported("a prompt of 2 tokens: run.c adds its dummy-prefix token to any non-empty prompt text")
        if BOS in rest:
            raise Unsupported("the prompt's first token comes back later in it: run.c stops at its BOS (token 1)")
        if len(set(rest[1:]) - set(rest[:1])) > len(ALPHABET):
            raise Unsupported(f"the prompt has more than {len(ALPHABET)} distinct ids, more than one-byte pieces")
        return cls(vocab_size, tuple(prompt))

    @functools.cached_property
    def _piece_of(self) -> dict[int, bytes]:
        rest = self.prompt[1:]
        if not rest:
            return {}
        others = [t for t in dict.fromkeys(rest[1:]) if t != rest[0]]
        return {rest[0]: DUMMY_PREFIX} | {t: bytes([ALPHABET[i]]) for i, t in enumerate(others)}

    def tokenizer(self) -> Tokenizer:
        """The `tokenizer.bin` contents: every id's piece, all scores 0 (nothing ever merges)."""
        pieces = list(marker_pieces(self.vocab_size))
        for token, piece in self._piece_of.items():
            pieces[token] = piece
        return Tokenizer(tuple(pieces), (0.0,) * self.vocab_size, 1 + code_width(self.vocab_size))

    def text(self) -> bytes:
        """The prompt string run.c encodes back into exactly this prompt."""
        return b"".join(self._piece_of[t] for t in self.prompt[2:])

    def read(self, printed: bytes, n_new: int) -> list[int]:
        """The ids run.c generated, from its stdout; ValueError if malformed, Unsupported if it stopped at BOS."""
        echo = self.text()
        if not printed.startswith(echo):
            raise ValueError(f"it does not start with the prompt's pieces {echo!r}")
        token_of = {piece[0]: t for t, piece in self._piece_of.items()}
        width = code_width(self.vocab_size)
        tokens: list[int] = []
        at = len(echo)
        while len(tokens) < n_new:
            if printed[at:] == b"\n":
                raise Unsupported(
                    f"run.c stopped after {len(tokens)} of {n_new} new tokens: the next was its BOS (token 1), "
                    "which ends generation"
                )
            if at >= len(printed):
                raise ValueError(f"it ended after {len(tokens)} of {n_new} new tokens")
            if printed[at] == MARKER:
                code = printed[at + 1 : at + 1 + width]
                token = sum((digit - 1) * _DIGITS**i for i, digit in enumerate(code))
                if len(code) != width or 0 in code or token >= self.vocab_size:
                    raise ValueError(f"malformed piece {printed[at : at + 1 + width]!r} at byte {at}")
                at += 1 + width
            elif printed[at] in token_of:
                token = token_of[printed[at]]
                at += 1
            else:
                raise ValueError(f"byte {printed[at]:#04x} at offset {at} is no piece of the tokenizer written for it")
            tokens.append(token)
        if printed[at:] != b"\n":
            raise ValueError(f"after {n_new} new tokens it printed {printed[at : at + 40]!r}, not a newline")
        return tokens
