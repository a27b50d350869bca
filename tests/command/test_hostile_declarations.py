"""A declarations file written to hurt (issue 45), through `verifier check --command ... --declarations FILE`
and the file beside the program: each is refused with exit status 2 and one line of bounded length
naming the file, before any property runs; a special file in its place is refused by name, not read."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.model.config import FAMILIES
from verifier.plugin.interface import SWITCHES

# A line of a few hundred characters: `verifier check: error: `, the file's path, the key and the problem.
MAX_LINE = 1000
# Were the file accepted, the check would go on to run the whole suite; this option, checked after the
# declarations and before the run, stops it there, so that a test of a file the check wrongly accepts
# fails at once (on the wrong message) instead of running the suite.
GUARD = "--llama2c-src=no-llama2c-here"


def check(directory: Path, declarations: Path | None, capsys: pytest.CaptureFixture[str], *more: str) -> str:
    """The one line `verifier check` prints to stderr for a program in `directory` declared by
    `declarations` (None: the file beside the program) and the options `more`; exit status 2, quickly."""
    program = directory / "prog"
    program.write_text("#!/bin/sh\nexit 1\n")
    program.chmod(0o755)
    named = [] if declarations is None else ["--declarations", str(declarations)]
    command = ["check", "--command", "./prog text {model} {tokens}", "--format", "hf", "--gives", "logits-text"]
    started = time.perf_counter()
    status = main([*command, *named, *more, GUARD])
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert status == 2, err[:2000]
    assert len(lines) == 1, f"{len(lines)} lines: {err[:2000]}"
    assert len(lines[0]) <= MAX_LINE, f"{len(lines[0]):,} characters: {lines[0][:2000]}"
    assert seconds < 10, f"{seconds:.1f} s"  # the 16 MB list of the issue ran the suite for 2 minutes
    return lines[0]


@pytest.fixture(autouse=True)
def _run_where_the_program_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # `./prog` is found from where the check runs


def declared(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "decl.toml"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    return path


# -- the file's size, nesting and numbers: refused before and while TOML reads it -----------------------


@pytest.mark.parametrize(
    "text",
    [
        "families = " + "[" * 100_000 + "]" * 100_000 + "\n",  # was a 3,001-line RecursionError traceback
        "families = [" + '"gpt2", ' * 300_000 + "]\n",  # made a 130 MB conformance.json (16 MB in the issue)
        "switches = [" + '"qkv_bias", ' * 200_000 + "]\n",
    ],
    ids=["nested-100000-deep", "families-2MB", "switches-2MB"],
)
def test_a_file_larger_than_a_declarations_file_is_refused_by_its_size(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = declared(tmp_path, text)
    line = check(tmp_path, path, capsys)
    assert f"{path}: declarations file: too large for what it is (expected at most 65,536 bytes, found " in line
    assert f"found {path.stat().st_size:,} bytes)" in line


def test_a_100_mb_file_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The 100 MB value gave a 104 MB error line. A sparse file: its size without its bytes.
    path = declared(tmp_path, 'd_ff = "')
    with path.open("r+b") as f:
        f.truncate(100 * 2**20)
    line = check(tmp_path, path, capsys)
    assert line.endswith("(expected at most 65,536 bytes, found 104,857,600 bytes)")


def test_values_nested_deeper_than_python_recurses_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = declared(tmp_path, "families = " + "[" * 20_000 + "]" * 20_000 + "\n")  # within the size limit
    line = check(tmp_path, path, capsys)
    assert line == (
        f"verifier check: error: {path}: not a declarations file: values nested too deep to read "
        "(a declaration is a name, a number or a list of names)"
    )


def test_an_integer_of_5000_digits_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = declared(tmp_path, "max_n_ctx = " + "7" * 5000 + "\n")  # was a 40-line ValueError traceback
    line = check(tmp_path, path, capsys)
    assert line == (
        f"verifier check: error: {path}: not a declarations file: an integer too long to read "
        f"(expected at most {sys.get_int_max_str_digits():,} digits)"
    )


@pytest.mark.parametrize(
    ("value", "found"),
    [("7" * 5000, f"'{'7' * 199}... (5,000 characters)"), ("²", "'²'")],  # each a str.isdigit() that int() refuses
    ids=["5000-digits", "superscript"],
)
def test_a_number_int_refuses_in_an_option_is_one_line_in_the_usual_words(
    tmp_path: Path, value: str, found: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = check(tmp_path, None, capsys, "--max-n-ctx", value)  # was int()'s own words (and the 5,000 digits)
    assert line == f"verifier check: error: --max-n-ctx: expected a positive whole number of positions, found {found}"


def test_a_file_that_is_not_utf8_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = declared(tmp_path, b'd_ff = "\xff"\n')
    line = check(tmp_path, path, capsys)
    assert line.startswith(f"verifier check: error: {path}: not a TOML file: not UTF-8 text (")


# -- values quoted in the message: cut ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('d_ff = "' + "x" * 60_000 + '"\n', "d_ff in {path}: expected gpt2, llama2c or llama2c:M"),
        ("x" * 60_000 + " = 1\n", "{path}: unknown key 'xxxxx"),
        ("families = [" + '"gpt3", ' * 7_000 + "]\n", "families in {path}: expected one or more of gpt2, "),
    ],
    ids=["value", "key", "list"],
)
def test_a_long_value_is_quoted_by_a_bounded_prefix_and_its_size(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = declared(tmp_path, text)
    line = check(tmp_path, path, capsys)
    assert words.format(path=path) in line
    assert ("(7,000 items)" if "gpt3" in text else "... (60,000 characters)") in line


# -- lists: each name once ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("families = [" + '"gpt2", ' * 7_000 + "]\n", "families"),
        ('families = ["gpt2", "llama", "gpt2"]\n', "families"),
        (f"families = {list(FAMILIES) * 2}\n", "families"),
        ("switches = [" + '"qkv_bias", ' * 5_000 + "]\n", "switches"),
        (f"switches = {[*SWITCHES, SWITCHES[0]]}\n", "switches"),
    ],
    ids=["families-7000", "families-twice", "every-family-twice", "switches-5000", "switch-twice"],
)
def test_a_name_listed_twice_is_refused(
    tmp_path: Path, text: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accepted, a list of 2 million families made a 130 MB conformance.json: each model card and
    # refusal repeated it. Each name once bounds a list by the names there are.
    path = declared(tmp_path, text)
    line = check(tmp_path, path, capsys)
    assert f"{key} in {path}: expected each name once, found " in line


def test_a_name_given_twice_in_an_option_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = check(tmp_path, None, capsys, "--families", "gpt2,llama,gpt2")
    assert line == "verifier check: error: --families: expected each name once, found 'gpt2,llama,gpt2'"


# -- what is in the file's place ----------------------------------------------------------------------


def test_a_named_pipe_named_by_the_option_is_refused_by_name_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "decl.toml"
    os.mkfifo(path)
    line = check(tmp_path, path, capsys)
    assert line.startswith(f"verifier check: error: {path}: declarations file: not a regular file")


@pytest.mark.parametrize("kind", ["a named pipe", "a device"])
def test_a_special_file_beside_the_program_is_refused_by_name_not_read(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prog.verifier.toml"
    if kind == "a named pipe":
        os.mkfifo(path)  # was passed over without a word: the program ran with no declarations
    else:
        path.symlink_to("/dev/zero")  # never ends: read, it would fill the memory
    line = check(tmp_path, None, capsys)
    assert line.startswith(f"verifier check: error: {path}: declarations file: not a regular file")


def test_a_device_named_by_the_option_is_refused_by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = check(tmp_path, Path("/dev/zero"), capsys)
    assert line.startswith("verifier check: error: /dev/zero: declarations file: not a regular file")
