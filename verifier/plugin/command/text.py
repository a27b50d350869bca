"""Prompts as text for llama2.c's `run.c` (and programs that follow its rules), and its output read back.

The current run.c (llama2.c at 350e04f, `RUN_C`) encodes a prompt string as: token 1 (BOS), then,
for a non-empty string, the id of the piece " " (sentencepiece's dummy prefix), then each UTF-8 code
point's piece, merged pairwise by score. It prints the piece of every token after the first (a
leading space is stripped after BOS, one-byte pieces that are neither printable nor whitespace are
not printed), stops as soon as the next token is 1, and ends with a newline. The 2023 run.c
(`RUN_C_2023`, llama2.c at fd68dd2) has no dummy prefix, looks up each byte, prints any byte, never
stops early, and frames its output with "<s>\n" and "\nachieved tok/s: ...".

To pass any prompt of ids [a, b, c, ...] through that exactly, the suite renames ids so that `a` is
1 (swapping two ids' rows renames tokens without changing the function), and writes a vocabulary
made for the prompt:

- with a dummy prefix, `b` gets the piece " ";
- every other distinct prompt id gets its own one-byte piece from the rules' alphabet (no space);
- every other id gets MARKER followed by a fixed-width code of non-NUL bytes.

No piece is the concatenation of two others' bytes (every multi-byte piece starts with MARKER), so
nothing merges; printed output parses uniquely. What run.c cannot take is declared, not failed:
with a dummy prefix, a prompt of exactly 2 ids (a non-empty string always adds it); where
generation stops at BOS, a prompt whose first id comes back later and a continuation that reaches
it; more distinct ids than one-byte pieces.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from verifier.formats.llama2c_tokenizer import Tokenizer
from verifier.plugin.interface import Unsupported

BOS = 1
MARKER = 0xFF
DUMMY_PREFIX = b" "
_DIGITS = 255  # code digits are the bytes 1..255


@dataclass(frozen=True)
class TextRules:
    """How a llama2.c-style program takes its prompt string and prints what it generates."""

    name: str
    dummy_prefix: bool  # a non-empty prompt string adds the id of the piece " " after BOS
    stops_at_bos: bool  # generation ends when the next token is BOS
    alphabet: bytes  # one-byte pieces it encodes and prints as they are (no NUL, space or MARKER)
    head: bytes  # printed before the first piece
    tail: bytes  # printed after the last piece
    tail_ends_output: bool  # nothing may follow `tail`


RUN_C = TextRules("llama2.c's run.c", True, True, bytes(range(0x21, 0x7F)), b"", b"\n", True)
RUN_C_2023 = TextRules(
    "llama2.c's run.c of 2023-07",
    False,
    False,
    bytes(b for b in range(1, MARKER) if b != ord(" ")),
    b"<s>\n",
    b"\nachieved tok/s:",
    False,
)


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
    """One prompt (already renamed, so that it starts with BOS) as a program's text and vocabulary."""

    vocab_size: int
    prompt: tuple[int, ...]
    rules: TextRules = RUN_C

    @classmethod
    def for_prompt(cls, vocab_size: int, prompt: list[int], rules: TextRules = RUN_C) -> TextPrompt:
        """Raises Unsupported for a prompt the program cannot take (see the module docstring)."""
        if not prompt or prompt[0] != BOS:
            raise ValueError(f"the renamed prompt must start with {BOS}, found {prompt[:1]}")
        rest = prompt[1:]
        if rules.dummy_prefix and len(rest) == 1:
            raise Unsupported(f"a prompt of 2 tokens: {rules.name} adds its dummy-prefix token to any prompt text")
        if rules.stops_at_bos and BOS in rest:
            raise Unsupported(f"the prompt's first token comes back later: {rules.name} stops at its BOS (token 1)")
        spelled = set(rest[1:]) - set(rest[:1]) if rules.dummy_prefix else set(rest)
        if len(spelled) > len(rules.alphabet):
            raise Unsupported(
                f"the prompt has {len(spelled)} distinct token ids to spell; {rules.name}'s byte-wise prompt "
                f"encoding can give at most {len(rules.alphabet)} of them one-byte pieces"
            )
        return cls(vocab_size, tuple(prompt), rules)

    @functools.cached_property
    def _piece_of(self) -> dict[int, bytes]:
        rest = self.prompt[1:]
        alphabet = self.rules.alphabet
        if not self.rules.dummy_prefix:
            return {t: bytes([alphabet[i]]) for i, t in enumerate(dict.fromkeys(rest))}
        if not rest:
            return {}
        others = [t for t in dict.fromkeys(rest[1:]) if t != rest[0]]
        return {rest[0]: DUMMY_PREFIX} | {t: bytes([alphabet[i]]) for i, t in enumerate(others)}

    def tokenizer(self) -> Tokenizer:
        """The `tokenizer.bin` contents: every id's piece, all scores 0 (nothing ever merges)."""
        pieces = list(marker_pieces(self.vocab_size))
        for token, piece in self._piece_of.items():
            pieces[token] = piece
        return Tokenizer(tuple(pieces), (0.0,) * self.vocab_size, 1 + code_width(self.vocab_size))

    def text(self) -> bytes:
        """The prompt string the program encodes back into exactly this prompt."""
        spelled = self.prompt[2:] if self.rules.dummy_prefix else self.prompt[1:]
        return b"".join(self._piece_of[t] for t in spelled)

    def read(self, printed: bytes, n_new: int) -> list[int]:
        """The ids generated, from the program's stdout; ValueError if malformed, Unsupported if it stopped at BOS."""
        rules = self.rules
        echo = rules.head + self.text()  # the prompt's pieces are printed as they are forced
        if not printed.startswith(echo):
            raise ValueError(f"it does not start with {echo!r}")
        token_of = {piece[0]: t for t, piece in self._piece_of.items()}
        width = code_width(self.vocab_size)
        tokens: list[int] = []
        at = len(echo)
        while len(tokens) < n_new:
            if rules.stops_at_bos and printed[at:] == rules.tail:
                raise Unsupported(
                    f"{rules.name} stopped after {len(tokens)} of {n_new} new tokens: the next was its BOS "
                    "(token 1), which ends generation"
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
        rest = printed[at:]
        if not (rest == rules.tail if rules.tail_ends_output else rest.startswith(rules.tail)):
            raise ValueError(f"after {n_new} new tokens it printed {rest[:40]!r}, not {rules.tail!r}")
        return tokens
