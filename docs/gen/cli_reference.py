"""The command-line reference, written from `verifier.cli`'s own argument parser at build time, so the
page cannot drift from the options the command takes."""

from __future__ import annotations

import argparse

from verifier.cli import build_parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, by name, in the order `verifier --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(invocation, help) of every argument of `parser`, as `--help` writes them (help's %(default)s
    expanded); `-h` left out, as every subcommand has it."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        rows.append((invocation, formatter._expand_help(action) if action.help else ""))
    return rows


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference page: each subcommand's usage, description and a table of its options."""
    parser = parser or build_parser()
    out = [
        "# Command-line reference",
        "",
        "Generated from the argument parser of `verifier` (`verifier.cli.build_parser`) when the site is built;",
        "`verifier COMMAND --help` prints the same.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    for name, sub in subcommands(parser).items():
        out += [f"## verifier {name}", "", "```text", sub.format_usage().strip(), "```", ""]
        if sub.description:
            out += [_cell(sub.description), ""]
        out += ["| option | what it does |", "|---|---|"]
        out += [f"| `{_cell(invocation)}` | {_cell(help_)} |" for invocation, help_ in options(sub)]
        out.append("")
    return "\n".join(out)
