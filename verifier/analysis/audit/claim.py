"""A claim as the audit encodes it, and the row its check produces.

A `Claim` holds what is claimed, where (article, line, quote), the value as stated in a form its
check reads, and the check: a function of the inputs and a stated value. `check` runs it on the
stated value (or, to show that a check can tell a right statement from a wrong one, on another)
and applies the one verdict rule (`verdict.verdict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verifier.analysis.audit.articles import Place
from verifier.analysis.audit.inputs import Inputs
from verifier.analysis.audit.verdict import Evidence, Reading, verdict

Check = Callable[[Inputs, Any], Evidence]


@dataclass(frozen=True)
class Claim:
    """One claim: `id` (stable, for tests and JSON), a few words saying what is claimed, its places,
    the stated value (`stated`, read by `check`; `shown` as the row prints it), and the check."""

    id: str
    claim: str
    places: tuple[Place, ...]
    stated: Any
    shown: str
    check: Check


@dataclass(frozen=True)
class Row:
    """A checked claim: every field of the audit's table and JSON."""

    id: str
    group: str
    claim: str
    places: tuple[Place, ...]
    stated: str
    exact: str
    verdict: str
    why: str
    how: str
    readings: tuple[Reading, ...]
    arithmetic_only: bool


_STATED = object()


def check(claim: Claim, inputs: Inputs, group: str = "", stated: Any = _STATED) -> Row:
    """Check `claim` on its stated value, or on `stated` if given (shown as its repr)."""
    value, shown = (claim.stated, claim.shown) if stated is _STATED else (stated, repr(stated))
    e = claim.check(inputs, value)
    return Row(
        id=claim.id,
        group=group,
        claim=claim.claim,
        places=claim.places,
        stated=shown,
        exact=e.exact,
        verdict=verdict(e),
        why=e.why,
        how=e.how,
        readings=e.readings,
        arithmetic_only=e.arithmetic_only,
    )
