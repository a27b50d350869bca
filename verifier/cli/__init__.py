"""The `verifier` command: a thin face over the library, one module per subcommand."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from verifier import __version__
from verifier.analysis.audit import AuditError
from verifier.analysis.trace import TraceError
from verifier.cli import audit_cmd, check_cmd, inspect_cmd, kl_cmd, matrix_cmd, models_cmd, params_cmd, trace_cmd
from verifier.extra import ExtraMissing
from verifier.formats.errors import CheckpointError
from verifier.formats.sources import SourceError
from verifier.formats.tokenizer import TokenizerError
from verifier.messages import bounded
from verifier.model.config import FAMILIES, ConfigError
from verifier.model.presets import UnknownPresetError
from verifier.plugin.registry import PluginError
from verifier.reference import InputError
from verifier.report.output import ReportError
from verifier.report.suite import PytestOptionError, SuiteNotFound

# Each module has `add_parser(subparsers)`, which registers its subcommand with `func=run`.
SUBCOMMANDS = (params_cmd, inspect_cmd, trace_cmd, audit_cmd, check_cmd, matrix_cmd, kl_cmd, models_cmd)

# Errors that mean "bad input", reported in one bounded line with exit status 2, not as a traceback.
USER_ERRORS = (
    AuditError,
    CheckpointError,
    ConfigError,
    ExtraMissing,
    InputError,
    PluginError,
    PytestOptionError,
    ReportError,
    SourceError,
    SuiteNotFound,
    TokenizerError,
    TraceError,
    UnknownPresetError,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="verifier",
        description=f"Verify implementations of transformer language models ({', '.join(FAMILIES)}) against an "
        "independent NumPy reference.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except USER_ERRORS as e:  # bounded here too: not every type's str() is (a message may quote a 100 MB value)
        print(f"verifier {args.command}: error: {bounded(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the user's choice, not an error to trace (files are written atomically)
        print(f"verifier {args.command}: interrupted", file=sys.stderr)
        return check_cmd.INTERRUPTED
    except BrokenPipeError:  # `verifier ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a file the system will not let us read or write: say which, as the system says it
        where = f"{e.filename}: " if e.filename else ""
        message = bounded(f"{where}{e.strerror or e}")  # a file's name may be as long as the system allows
        print(f"verifier {args.command}: error: {message}", file=sys.stderr)
        return 2
