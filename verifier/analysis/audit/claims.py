"""The claims file (`verifier/data/audit/claims.toml`) read into `Claim`s, every row validated.

A row either names a checker (`checkers.CHECKERS`) with its arguments, or says why the claim is
deliberately not checked (`not_checked`). Any fault (a missing or unknown field, an unknown
article, group, checker, argument or formula, a quote not on its line) is a `ClaimsError` naming the
row. The quotes are checked against the articles when a directory of them is given (`SEEDS_ENV`):
the articles are not shipped.
"""

from __future__ import annotations

import inspect
import os
import tomllib
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from verifier.analysis.audit.articles import BY_LABEL, SEEDS_ENV, Place, at
from verifier.analysis.audit.checkers import CHECKERS, FORMULAS, RUNS
from verifier.analysis.audit.claim import Claim
from verifier.analysis.audit.verdict import figure

CLAIMS_FILE = resources.files("verifier") / "data" / "audit" / "claims.toml"
_FIELDS = {"id", "group", "claim", "places"}
_CHECKED = {"stated", "shown", "check"}  # and `arguments`, if the checker takes any


class ClaimsError(ValueError):
    """A row of the claims file that cannot be used."""


@dataclass(frozen=True)
class NotChecked:
    """A claim the audit deliberately does not check, and why."""

    id: str
    group: str
    claim: str
    places: tuple[Place, ...]
    why: str


@dataclass(frozen=True)
class Claims:
    """The claims file: the groups' titles, the checked claims (group title, claim) in order, and the
    claims deliberately not checked."""

    groups: dict[str, str]
    checked: tuple[tuple[str, Claim], ...]
    not_checked: tuple[NotChecked, ...]


def value(data: Any) -> Any:
    """A stated value or argument as the checks read it: {figure = TEXT} a `Figure`, {formula = NAME}
    a formula as stated, arrays tuples, and a table's keys of digits (sequence lengths) integers."""
    if isinstance(data, dict):
        if data.keys() == {"figure"}:
            return figure(data["figure"])
        if data.keys() == {"formula"}:
            if data["formula"] not in FORMULAS:
                raise ValueError(f"unknown formula {data['formula']!r}; known: {', '.join(FORMULAS)}")
            return FORMULAS[data["formula"]]
        return {int(k) if k.isdigit() else k: value(v) for k, v in data.items()}
    if isinstance(data, list):
        return tuple(value(v) for v in data)
    return data


def load(path: Path | None = None, seeds: Path | None = None) -> Claims:
    """The claims of `path` (default: the shipped file), each row validated; quotes are checked against
    the articles in `seeds` (default: $VERIFIER_SEEDS_DIR, if set)."""
    text = path.read_text(encoding="utf-8") if path else CLAIMS_FILE.read_text(encoding="utf-8")
    name = str(path or "verifier/data/audit/claims.toml")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ClaimsError(f"{name}: {e}") from None
    seeds = seeds or (Path(os.environ[SEEDS_ENV]) if os.environ.get(SEEDS_ENV) else None)
    groups = data.get("groups", {})
    checked: list[tuple[str, Claim]] = []
    not_checked: list[NotChecked] = []
    for n, row in enumerate(data.get("claim", []), 1):
        where = f"{name}: claim {row.get('id', f'#{n}')!r}"
        try:
            claim = _row(row, groups, seeds)
        except KeyError as e:  # a place without its article, line or quote
            raise ClaimsError(f"{where}: a place is missing {e}") from None
        except (ValueError, TypeError) as e:
            raise ClaimsError(f"{where}: {e}") from None
        if any(c.id == claim.id for _, c in checked) or any(c.id == claim.id for c in not_checked):
            raise ClaimsError(f"{where}: a second row with this id")
        if isinstance(claim, NotChecked):
            not_checked.append(claim)
        else:
            checked.append((groups[row["group"]], claim))
    return Claims(groups, tuple(checked), tuple(not_checked))


def _row(row: dict[str, Any], groups: dict[str, str], seeds: Path | None) -> Claim | NotChecked:
    """One row's claim, or the claim it deliberately does not check."""
    required = _FIELDS | ({"not_checked"} if "not_checked" in row else _CHECKED)
    missing = sorted(required - row.keys())
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    unknown = sorted(row.keys() - required - ({"arguments"} if "check" in row else set()))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (a row has a check or not_checked, not both)")
    if row["group"] not in groups:
        raise ValueError(f"unknown group {row['group']!r}; known: {', '.join(groups)}")
    places = tuple(at(p["article"], p["line"], p["quote"]) for p in row["places"])
    if not places:
        raise ValueError("no places")
    if seeds is not None:
        for place in places:
            _quoted(place, seeds)
    if "not_checked" in row:
        return NotChecked(row["id"], groups[row["group"]], row["claim"], places, row["not_checked"])
    checker = CHECKERS.get(row["check"])
    if checker is None:
        raise ValueError(f"unknown checker {row['check']!r}")
    arguments = value(row.get("arguments", {}))
    try:
        inspect.signature(checker).bind(None, None, **arguments)
    except TypeError as e:
        raise ValueError(f"arguments of {row['check']}: {e}") from None
    if "model" in arguments and arguments["model"] not in RUNS:
        raise ValueError(f"unknown model {arguments['model']!r}; known: {', '.join(RUNS)}")
    return Claim(row["id"], row["claim"], places, value(row["stated"]), row["shown"], partial(checker, **arguments))


def _quoted(place: Place, seeds: Path) -> None:
    lines = (seeds / BY_LABEL[place.article].file).read_text(encoding="utf-8").splitlines()
    line = lines[place.line - 1] if 0 < place.line <= len(lines) else ""
    if place.quote not in line:
        raise ValueError(f"{place.article} l.{place.line} does not contain {place.quote!r}")
