"""The per-prompt tokenizer against a Python transcription of run.c's encoder and printer (no compiler needed)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from verifier.plugin.llama2c.vocab import ALPHABET, MARKER, PromptTooVaried, PromptVocabulary


def run_c_encode(text: bytes, pieces: tuple[bytes, ...], scores: tuple[float, ...]) -> list[int]:
    """run.c's bpe_encode: every byte by lookup (first match), then best-score merges while any pair is a piece."""
    first = {}
    for i, p in enumerate(pieces):
        first.setdefault(p, i)
    tokens = []
    for byte in text:
        if bytes([byte]) not in first:
            raise AssertionError("run.c would exit: 'not good'")
        tokens.append(first[bytes([byte])])
    while True:
        best = (-1e10, -1, -1)
        for i in range(len(tokens) - 1):
            merged = first.get(pieces[tokens[i]] + pieces[tokens[i + 1]])
            if merged is not None and scores[merged] > best[0]:
                best = (scores[merged], merged, i)
        if best[2] == -1:
            return tokens
        tokens[best[2] : best[2] + 2] = [best[1]]


def run_c_print(tokens: list[int], pieces: tuple[bytes, ...]) -> bytes:
    """What run.c prints: each token's piece, without a leading space after token 1 (BOS is fed first)."""
    out, previous = b"", 1
    for t in tokens:
        piece = pieces[t]
        out += piece[1:] if previous == 1 and piece[:1] == b" " else piece
        previous = t
    return out


@given(
    vocab_size=st.integers(2, 70000),
    data=st.data(),
)
@example(vocab_size=32000, data=None)
def test_any_prompt_and_continuation_round_trip(vocab_size: int, data: st.DataObject | None) -> None:
    if data is None:  # every alphabet byte in use, and the largest ids
        prompt = list(range(vocab_size - len(ALPHABET), vocab_size))
        generated = [1, 0, vocab_size - 1, prompt[0], 255 * 2 - 1]
    else:
        ids = st.integers(0, vocab_size - 1)
        prompt = data.draw(st.lists(ids, max_size=300, unique_by=lambda t: t % 1000), label="prompt")[: len(ALPHABET)]
        generated = data.draw(st.lists(ids | st.sampled_from(prompt or [1]), max_size=20), label="generated")
    vocab = PromptVocabulary.for_prompt(vocab_size, prompt)
    tok = vocab.tokenizer()
    assert len(set(tok.pieces)) == vocab_size, "pieces must be distinct for the output to parse"
    assert max(len(p) for p in tok.pieces) <= tok.max_token_length
    assert run_c_encode(vocab.encode(prompt), tok.pieces, tok.scores) == prompt
    printed = b"<s>\n" + run_c_print(prompt + generated, tok.pieces) + b"\nachieved tok/s: 1.0\n"
    tokens, end = vocab.decode(printed, len(prompt) + len(generated), start=4)
    assert tokens == prompt + generated
    assert printed[end:].startswith(b"\nachieved")


def test_the_alphabet_avoids_what_run_c_cuts_or_strips() -> None:
    assert 0 not in ALPHABET and ord(" ") not in ALPHABET and MARKER not in ALPHABET
    assert len(set(ALPHABET)) == len(ALPHABET) == 253


def test_a_prompt_with_too_many_distinct_ids_is_refused() -> None:
    with pytest.raises(PromptTooVaried, match="254 distinct token ids"):
        PromptVocabulary.for_prompt(1000, list(range(254)))


def test_a_fixed_vocabulary_would_not_round_trip() -> None:
    """Why a tokenizer per prompt: with the real pieces, ids whose concatenation is a piece get merged."""
    pieces = (b"<unk>", b"<s>", b"</s>", b"a", b"b", b"ab")
    assert run_c_encode(b"ab", pieces, (0.0,) * 6) == [5]  # the prompt [3, 4] comes back as [5]
