"""What a program declares it runs, as a Python factory does (`verifier.Constraints` and a precision class).

A program declares by options (`verifier check --families gpt2`, `pytest --command-families gpt2`) or in
a TOML file beside it named after it, `<program>.verifier.toml` (`./gpt2` reads `./gpt2.verifier.toml`),
or in the file `--declarations FILE` names; an option wins over the file. The file's keys are those of
`DECLARATIONS`, for example:

    families = ["gpt2"]
    switches = []            # the families' plain form only (no RoPE scaling, window, bias, ...)
    d_ff = "gpt2"
    tie_embeddings = true
    norm_eps = 1e-5
    max_n_ctx = 1024
    precision = "float32"

A value that cannot be read, or a key the file should not hold, is a `DeclarationError` naming the
option or the file and key. The file is small by its nature, and read as such: at most
`MAX_FILE_BYTES`, a regular file (not a pipe or a device), each name of a list once; the values a
message quotes are cut (`verifier.messages.quoted`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.analysis.precision import CLASSES, UnknownPrecision, resolve
from verifier.formats.errors import CheckpointError
from verifier.formats.fileio import read_small
from verifier.messages import quoted
from verifier.model.config import FAMILIES
from verifier.model.presets import gpt2_d_ff, llama2c_hidden_dim
from verifier.plugin.command.template import CommandTemplateError
from verifier.plugin.interface import SWITCHES, Constraints

# Each declaration and what its value means (option help and the file's documentation).
DECLARATIONS: dict[str, str] = {
    "families": f"the families it runs, of {', '.join(FAMILIES)} (comma-separated as an option, a list in the file)",
    "d_ff": "its MLP width rule: gpt2 (4 x d_model), llama2c (llama2.c's rule, a multiple of 32), llama2c:M "
    "(a multiple of M, e.g. llama2c:256 for Meta's Llama)",
    "tie_embeddings": "true: it runs a tied classifier only; false: an untied one only",
    "norm_eps": "the one norm eps it hard-codes",
    "rope_theta": "the one RoPE theta it hard-codes",
    "grouped_query": "false: it has no grouped-query attention (n_kv_heads == n_heads only)",
    "max_n_ctx": "the longest context it runs",
    "switches": f"the free switches of those families it runs, of {', '.join(SWITCHES)} (comma-separated as an "
    "option, a list in the file; none: the plain families only); default every one",
    "precision": f"the precision class it computes at: {', '.join(CLASSES)}",
}
# How each declaration's value is shown in the options' help.
METAVARS: dict[str, str] = {
    "families": "gpt2,llama", "switches": "rope_scaling,...|none", "d_ff": "RULE", "tie_embeddings": "true|false",
    "norm_eps": "EPS",    "rope_theta": "THETA", "grouped_query": "true|false", "max_n_ctx": "N", "precision": "CLASS",
}  # fmt: skip
FILE_SUFFIX = ".verifier.toml"
# The example above is 150 bytes; every key with a long comment is well under 4 KiB. A larger file is no
# declarations file, and is refused before it is read (the 16 MB list made a 130 MB report).
MAX_FILE_BYTES = 64 * 2**10


class DeclarationError(CommandTemplateError):
    """A declaration that cannot be read; the message names the option, or the file and key."""


@dataclass(frozen=True)
class Declarations:
    """A program's declarations: the configs it runs (None: any) and its precision class (None: the format's)."""

    constraints: Constraints | None = None
    precision: str | None = None


def beside(program: Path) -> Path:
    """The declaration file of `program`: `<program>.verifier.toml` in its directory."""
    return program.with_name(program.name + FILE_SUFFIX)


def read_file(path: Path) -> dict[str, Any]:
    """The declarations in the TOML file `path`; DeclarationError for a file that cannot be read, is
    larger than MAX_FILE_BYTES, is not a regular file, is not TOML or holds an unknown key."""
    try:
        data = read_small(path, "declarations file", MAX_FILE_BYTES)
    except CheckpointError as e:  # missing, unreadable, a pipe or a device (refused unread), or too large
        raise DeclarationError(str(e)) from None
    try:
        found = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DeclarationError(f"{path}: not a TOML file: not UTF-8 text ({e.reason} at byte {e.start:,})") from None
    except tomllib.TOMLDecodeError as e:
        raise DeclarationError(f"{path}: not a TOML file: {e}") from None
    except RecursionError:  # tomllib reads nested arrays and tables by recursion: 64 KiB of `[` is too deep
        raise DeclarationError(
            f"{path}: not a declarations file: values nested too deep to read "
            "(a declaration is a name, a number or a list of names)"
        ) from None
    except ValueError:  # the one other ValueError tomllib lets out: int() refusing more digits than Python allows
        raise DeclarationError(
            f"{path}: not a declarations file: an integer too long to read "
            f"(expected at most {sys.get_int_max_str_digits():,} digits)"
        ) from None
    for key in found:
        if key not in DECLARATIONS:
            raise DeclarationError(f"{path}: unknown key {quoted(key, literal=True)}; known: {', '.join(DECLARATIONS)}")
    return found


def parse(values: Mapping[str, Any], where: Mapping[str, str]) -> Declarations:
    """The declarations in `values` (key -> an option's text, or a TOML value); `where[key]` names
    where each came from (`--norm-eps`, `norm_eps in ./gpt2.verifier.toml`) for the error."""
    fields: dict[str, Any] = {}
    for key, value in values.items():
        try:
            fields[key] = _READERS[key](value)
        except (ValueError, TypeError) as e:
            raise DeclarationError(f"{where[key]}: {e}, found {quoted(value, literal=True)}") from None
    precision = fields.pop("precision", None)
    return Declarations(Constraints(**fields) if fields else None, precision)


def _families(value: Any) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names or any(n not in FAMILIES for n in names):
        raise ValueError(f"expected one or more of {', '.join(FAMILIES)}")
    return _once(names)


def _switches(value: Any) -> tuple[str, ...]:
    if value == "none":
        return ()
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or any(n not in SWITCHES for n in names):
        raise ValueError(f"expected none, or some of {', '.join(SWITCHES)}")
    return _once(names)


def _once(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`names` (known ones), each named once: a list is then at most as long as there are names to list
    (a declared list is repeated in the reports, once per model card and refusal)."""
    if len(set(names)) != len(names):
        raise ValueError("expected each name once")
    return tuple(names)


def _d_ff(value: Any) -> Callable[[int], int]:
    rule, _, multiple = value.partition(":") if isinstance(value, str) else ("", "", "")
    if rule == "gpt2" and not multiple:
        return gpt2_d_ff
    if rule == "llama2c" and not multiple:
        return llama2c_hidden_dim
    if rule == "llama2c" and multiple.isdigit() and int(multiple) > 0:
        return functools.partial(llama2c_hidden_dim, multiple_of=int(multiple))
    raise ValueError("expected gpt2, llama2c or llama2c:M (M a positive whole number)")


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    raise ValueError("expected true or false")


def _positive_number(value: Any) -> float:
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError("expected a positive number")
    return number


def _positive_int(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        # int() refuses more digits than Python allows, and digits such as "²" that isdigit() admits
        with contextlib.suppress(ValueError):
            value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("expected a positive whole number of positions")
    return value


def _precision(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected one of {', '.join(CLASSES)}")
    try:
        resolve(value)
    except UnknownPrecision:
        raise ValueError(f"expected one of {', '.join(CLASSES)}") from None
    return value


_READERS: dict[str, Callable[[Any], Any]] = {
    "families": _families,
    "switches": _switches,
    "d_ff": _d_ff,
    "tie_embeddings": _boolean,
    "norm_eps": _positive_number,
    "rope_theta": _positive_number,
    "grouped_query": _boolean,
    "max_n_ctx": _positive_int,
    "precision": _precision,
}
