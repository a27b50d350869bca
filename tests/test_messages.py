"""The one bounded formatter of messages (verifier.messages): a quoted value and a whole message are cut
to a bounded length with an ellipsis and a note of the original size, whatever the input's size."""

from __future__ import annotations

import time

import pytest

from verifier.messages import MAX_LINE, MAX_LINES, MAX_QUOTED, BoundedMessage, bounded, quoted


def test_a_short_value_is_quoted_whole() -> None:
    assert quoted("gpt2") == "gpt2"
    assert quoted("gpt2", literal=True) == "'gpt2'"
    assert quoted(12) == quoted(12, literal=True) == "12"
    assert quoted(["gpt2", "llama"]) == "['gpt2', 'llama']"


@pytest.mark.parametrize(
    ("value", "literal", "start", "end"),
    [
        ("y" * 20_000_000, False, "yyy", "yyy... (20,000,000 characters)"),
        ("y" * 20_000_000, True, "'yyy", "yyy... (20,000,000 characters)"),
        (b"\x00" * 20_000_000, True, "b'\\x00", "... (20,000,000 bytes)"),
        (10**4000, False, "1000", "000... (4,001 characters)"),
    ],
    ids=["str", "literal-str", "bytes", "int"],
)
def test_a_long_value_is_cut_with_its_size(value: object, literal: bool, start: str, end: str) -> None:
    started = time.perf_counter()
    text = quoted(value, literal=literal)
    assert time.perf_counter() - started < 0.5  # cut before it is formatted, not after
    assert text.startswith(start) and text.endswith(end)
    assert len(text) <= MAX_QUOTED + len(end)


def test_a_long_list_is_shown_by_its_first_items_and_its_length() -> None:
    text = quoted(["gpt2"] * 2_000_000)
    assert text.startswith("['gpt2', 'gpt2', ") and text.endswith(", ...] (2,000,000 items)")
    assert len(text) <= MAX_QUOTED + 30


def test_a_deeply_nested_list_is_shown_to_a_few_levels() -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    assert quoted(nested) == "[[[[...]]]]"


def test_a_short_message_is_unchanged() -> None:
    message = "vocab.json: piece 'xy' has id 300; the ids must be integers 0 .. 256"
    assert bounded(message) == message


def test_a_long_line_is_cut_to_the_bound_with_its_length() -> None:
    text = bounded("x" * 100_000_000)
    assert len(text) == MAX_LINE and text.endswith("x... (100,000,000 characters)")


def test_many_lines_are_cut_to_the_bound_with_how_many_are_left_out() -> None:
    text = bounded("a line\n" * 1_000_000)
    lines = text.split("\n")
    assert len(lines) == MAX_LINES
    assert lines[:-1] == ["a line"] * (MAX_LINES - 1) and lines[-1] == f"... ({1_000_000 - MAX_LINES + 1:,} more lines)"


def test_characters_that_are_not_printable_are_escaped_in_each_line() -> None:
    assert bounded("one\x1b[2J\r\ttwo\nthree\u2028") == "one\\x1b[2J\\r\\ttwo\nthree\\u2028"


def test_a_line_of_characters_that_grow_when_escaped_is_still_bounded() -> None:
    text = bounded("\x00" * 10_000)
    assert len(text) <= MAX_LINE and text.endswith("... (10,000 characters)")


@pytest.mark.parametrize("message", ["x" * 10_000, "a\n" * 100, "\x00" * 10_000, "short"])
def test_bounding_twice_is_bounding_once(message: str) -> None:
    assert bounded(bounded(message)) == bounded(message)


def test_an_error_type_s_str_is_its_message_bounded() -> None:
    class Refused(BoundedMessage, ValueError):
        pass

    error = Refused("x" * 10_000_000)
    assert str(error) == bounded("x" * 10_000_000)
    assert error.args == ("x" * 10_000_000,)  # the message itself is kept, for code that reads it
