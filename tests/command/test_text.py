"""Prompts as text for llama2.c's run.c: what the vocabulary made for a prompt holds, and output read back."""

from __future__ import annotations

import pytest

from verifier.plugin.command.text import MARKER, RUN_C, TextPrompt
from verifier.plugin.interface import Unsupported

V = 300


def test_the_second_id_is_the_dummy_prefix_and_the_rest_are_one_byte_pieces() -> None:
    text = TextPrompt.for_prompt(V, [1, 7, 9, 7, 250])
    pieces = text.tokenizer().pieces
    assert pieces[7] == b" " and len(pieces[9]) == len(pieces[250]) == 1
    assert text.text() == pieces[9] + b" " + pieces[250]
    assert all(p[0] == MARKER for i, p in enumerate(pieces) if i not in (7, 9, 250))
    assert len(set(pieces)) == V  # every id can be read back


def test_output_is_read_back_through_marker_and_one_byte_pieces() -> None:
    text = TextPrompt.for_prompt(V, [1, 7, 9])
    pieces = text.tokenizer().pieces
    printed = text.text() + pieces[260] + b" " + pieces[9] + b"\n"
    assert text.read(printed, 3) == [260, 7, 9]


@pytest.mark.parametrize(
    ("printed", "problem"),
    [
        (b"X\n", "does not start with"),
        (b"\x01\xff\x02\x01", "ended after 1 of 2 new tokens"),
        (b"\x01\xff\x02\x01\x01\n", r"byte 0x01 at offset 4 is no piece"),
        (b"\x01\xff\x02\x01\xff\x02\x01extra", r"printed b'extra', not b'\\n'"),
    ],
)
def test_malformed_output_is_refused_saying_where(printed: bytes, problem: str) -> None:
    text = TextPrompt.for_prompt(V, [1, 7, 9])
    printed = printed.replace(b"\x01", text.tokenizer().pieces[9], 1)
    with pytest.raises(ValueError, match=problem):
        text.read(printed, 2)


def test_a_stop_at_bos_is_a_declared_limit() -> None:
    text = TextPrompt.for_prompt(V, [1, 7, 9])
    with pytest.raises(Unsupported, match="stopped after 0 of 2 new tokens: the next was its BOS"):
        text.read(text.text() + b"\n", 2)


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [
        ([1, 5], "a prompt of 2 tokens"),
        ([1, 5, 6, 1], "first token comes back later"),
        ([1, 5, *range(10, 10 + len(RUN_C.alphabet) + 1)], "95 distinct token ids to spell"),
    ],
    ids=["two-tokens", "bos-again", "too-varied"],
)
def test_prompts_run_c_cannot_take_are_unsupported(prompt: list[int], problem: str) -> None:
    with pytest.raises(Unsupported, match=problem):
        TextPrompt.for_prompt(V, prompt)
