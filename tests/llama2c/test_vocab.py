"""The per-prompt tokenizer against a Python transcription of run.c's encoder and printer (no compiler
needed), for the current run.c's rules and the 2023 run.c's."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from verifier.plugin.command.text import BOS, MARKER, RUN_C, RUN_C_2023, TextPrompt, TextRules
from verifier.plugin.interface import Unsupported


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


def run_c_tokens(rules: TextRules, text: bytes, pieces: tuple[bytes, ...], scores: tuple[float, ...]) -> list[int]:
    """The prompt tokens run.c feeds after BOS: the dummy prefix (current run.c, non-empty text), then the text."""
    dummy = [pieces.index(b" ")] if rules.dummy_prefix and text else []
    return dummy + run_c_encode(text, pieces, scores)


@pytest.mark.parametrize("rules", [RUN_C, RUN_C_2023], ids=["current", "2023"])
@given(vocab_size=st.integers(3, 70000), data=st.data())
@example(vocab_size=32000, data=None)
def test_any_prompt_and_continuation_round_trip(rules: TextRules, vocab_size: int, data: st.DataObject | None) -> None:
    width = len(rules.alphabet) + (1 if rules.dummy_prefix else 0)
    if data is None:  # every alphabet byte in use, and the largest ids
        rest = list(range(vocab_size - width, vocab_size))
        generated = [0, vocab_size - 1, rest[0], 255 * 2 - 1] + ([] if rules.stops_at_bos else [BOS])
    else:
        ids = st.integers(0, vocab_size - 1).filter(lambda t: t != BOS)
        rest = data.draw(st.lists(ids, max_size=300, unique_by=lambda t: t % 1000), label="prompt")[:width]
        generated = data.draw(st.lists(ids | st.sampled_from(rest or [0]), max_size=20), label="generated")
    if rules.dummy_prefix and len(rest) == 1:
        rest = []
    prompt = [BOS, *rest]
    text = TextPrompt.for_prompt(vocab_size, prompt, rules)
    tok = text.tokenizer()
    assert len(set(tok.pieces)) == vocab_size, "pieces must be distinct for the output to parse"
    assert max(len(p) for p in tok.pieces) <= tok.max_token_length
    assert run_c_tokens(rules, text.text(), tok.pieces, tok.scores) == rest
    printed = rules.head + run_c_print(rest + generated, tok.pieces) + rules.tail
    assert text.read(printed + (b"" if rules.tail_ends_output else b" 1.0\n"), len(generated)) == generated


@pytest.mark.parametrize(("rules", "size"), [(RUN_C, 94), (RUN_C_2023, 253)], ids=["current", "2023"])
def test_the_alphabet_avoids_what_run_c_cuts_or_strips(rules: TextRules, size: int) -> None:
    alphabet = rules.alphabet
    assert 0 not in alphabet and ord(" ") not in alphabet and MARKER not in alphabet
    assert len(set(alphabet)) == len(alphabet) == size


def test_a_prompt_with_too_many_distinct_ids_is_refused() -> None:
    with pytest.raises(Unsupported, match="254 distinct token ids"):
        TextPrompt.for_prompt(1000, [BOS, *range(2, 256)], RUN_C_2023)


def test_a_fixed_vocabulary_would_not_round_trip() -> None:
    """Why a tokenizer per prompt: with the real pieces, ids whose concatenation is a piece get merged."""
    pieces = (b"<unk>", b"<s>", b"</s>", b"a", b"b", b"ab")
    assert run_c_encode(b"ab", pieces, (0.0,) * 6) == [5]  # the prompt [3, 4] comes back as [5]
