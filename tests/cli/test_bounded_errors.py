"""Every error the command line reports is bounded (issue 45): a message of any size, from any of the
user errors or the system, is printed in a few lines of a few hundred characters, and the user errors'
own str() is bounded too (the pytest plugin turns them into usage errors with it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from verifier.cli import USER_ERRORS, main, params_cmd
from verifier.formats.errors import CheckpointError
from verifier.formats.sources import SourceError
from verifier.model.config import ConfigError
from verifier.plugin.command.declarations import DeclarationError
from verifier.plugin.command.template import CommandTemplateError, ProgramNotFound
from verifier.plugin.registry import PluginError

HUGE = "x" * 10_000_000  # a value from a hostile file, quoted whole by a message
MAX_LINE = 1000  # characters: `verifier params: error: ` and a message of a few hundred
MAX_LINES = 12

# The error types whose constructor takes more than the message, made as their modules make them.
MADE: dict[str, Callable[[str], BaseException]] = {
    "CheckpointError": lambda text: CheckpointError("model.bin", "header", text),
    "ConfigError": lambda text: ConfigError("d_model", text),
}


def made(error: type[BaseException], text: str) -> BaseException:
    """An `error` whose message says that `text` is what is wrong."""
    return MADE.get(error.__name__, error)(text)


def printed(error: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines `verifier params` prints to stderr when its work raises `error`; exit status 2."""

    def raises(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(params_cmd, "run", raises)
    assert main(["params", "gpt2"]) == 2
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("error", USER_ERRORS, ids=lambda e: e.__name__)
def test_a_huge_message_of_every_user_error_is_one_bounded_line(
    error: type[BaseException], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was the whole message: 104 MB in one line for the declaration value.
    lines = printed(made(error, f"the value {HUGE} is wrong"), monkeypatch, capsys)
    assert len(lines) == 1 and len(lines[0]) <= MAX_LINE, f"{len(lines)} lines, the first {len(lines[0]):,} long"
    assert lines[0].startswith("verifier params: error: ") and "characters)" in lines[0]


def test_a_message_of_a_million_lines_is_a_bounded_number_of_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = printed(PluginError("x\n" * 1_000_000), monkeypatch, capsys)
    assert len(lines) <= MAX_LINES and all(len(line) <= MAX_LINE for line in lines)
    assert lines[-1] == "... (999,991 more lines)"


def test_a_huge_file_name_of_a_system_error_is_bounded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = printed(PermissionError(13, "Permission denied", "/" + HUGE), monkeypatch, capsys)
    assert len(lines) == 1 and len(lines[0]) <= MAX_LINE
    assert lines[0].startswith("verifier params: error: /xxx") and "characters)" in lines[0]


def test_a_control_character_in_a_message_is_shown_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file's string may hold a terminal's escape sequence: shown, not obeyed.
    lines = printed(SourceError("model '\x1b[2J\rcleared'"), monkeypatch, capsys)
    assert lines == ["verifier params: error: model '\\x1b[2J\\rcleared'"]


# verifier/report/suite.py's two are bounded by `main` only: they name pytest's options and the suite's
# folder, never a file's value, and the pytest plugin does not show them.
BOUNDED_BY_MAIN_ONLY = ("PytestOptionError", "SuiteNotFound")
ERROR_TYPES = [
    *(e for e in USER_ERRORS if e.__name__ not in BOUNDED_BY_MAIN_ONLY),
    CommandTemplateError,  # the pytest plugin's usage errors: PluginError and these
    DeclarationError,
    ProgramNotFound,
]


@pytest.mark.parametrize("error", ERROR_TYPES, ids=lambda e: e.__name__)
def test_the_str_of_every_user_error_is_bounded(error: type[BaseException]) -> None:
    # The pytest plugin turns these into pytest.UsageError by their str(): bounded there as at the CLI.
    text = str(made(error, f"the value {HUGE} is wrong"))
    assert "\n" not in text and len(text) <= MAX_LINE, f"{len(text):,} characters"
