"""The audit's one verdict rule, and the comparisons that feed it.

A claim's check compares what the article states with what the suite finds and returns `Evidence`:
how the claim, read as written, matches (`Match`), and how any other reading its words admit matches.
`verdict` turns evidence into a verdict the same way for every row; `RULE` states it for readers.
Numbers are compared by `compare_figure`, the only place the rounding rule lives: a figure is rounded
only when it is the exact quantity rounded at the precision the figure is written to.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from verifier.analysis import tolerance

CORRECT, ROUNDED, MISLEADING, WRONG = "correct", "rounded", "misleading", "wrong"
NOT_CHECKABLE, SKIPPED = "not checkable", "skipped"
VERDICTS = (CORRECT, ROUNDED, MISLEADING, WRONG, NOT_CHECKABLE, SKIPPED)
# The verdicts that judge the words right and those that judge them wrong: no line of an article is
# given one of each by two rows (a line with a true statement and a false one is one row, wrong). A
# misleading row names a reading in which the words hold, so it is neither; not checkable and skipped
# rows judge nothing.
JUDGED_RIGHT = (CORRECT, ROUNDED)
JUDGED_WRONG = (WRONG,)

RULE = """\
correct       the claim, read as written, holds: a count or size equal to the exact one, a shape
              equal, a formula that gives the reference layer's output within float32 rounding.
rounded       a figure that is the exact value rounded at the figure's last written digit (the
              trailing zeros of a whole number are not written digits): 15M for 15,191,712, 50,000
              for 50,257, 7.08M for 7,077,888; 124M for 123,334,656 is not (it rounds to 123M).
misleading    read as written, the claim does not hold, but its words also admit another reading,
              named in the row, that does (one attention head at full width; values stored, not learned).
wrong         neither.
not checkable the claim is about trained weights, which are not here; the row says what would check it.
skipped       a checkable claim whose input is missing here (the tokenizer, transformers); the row
              says which."""


class Match(enum.Enum):
    """How a statement compares with what the suite finds."""

    EXACT = "exact"  # holds exactly (or within float32 rounding, for computed arrays)
    ROUND = "round"  # the exact value rounded at the stated figure's precision
    NO = "no"  # does not hold
    NEEDS_WEIGHTS = "needs trained weights"  # about trained values; no trained weights here
    NEEDS_INPUT = "needs an input"  # checkable, but its input (tokenizer, transformers) is missing


_ORDER = (Match.EXACT, Match.ROUND, Match.NO)


def worst(matches: Sequence[Match]) -> Match:
    """The weakest of several matches of the parts of one statement (EXACT < ROUND < NO)."""
    return max(matches, key=_ORDER.index)


@dataclass(frozen=True)
class Reading:
    """Another reading of a claim's words, and how it matches."""

    reading: str
    match: Match


@dataclass(frozen=True)
class Evidence:
    """What a check found: the exact value (shown), how the claim as read matches, why, how it was
    checked, other readings the words admit, and whether the check is the article's arithmetic only."""

    exact: str
    match: Match
    why: str
    how: str
    readings: tuple[Reading, ...] = ()
    arithmetic_only: bool = False


def verdict(evidence: Evidence) -> str:
    """The verdict of a row from its evidence (see RULE)."""
    if evidence.match is Match.NEEDS_WEIGHTS:
        return NOT_CHECKABLE
    if evidence.match is Match.NEEDS_INPUT:
        return SKIPPED
    if evidence.match is Match.EXACT:
        return CORRECT
    if evidence.match is Match.ROUND:
        return ROUNDED
    if any(r.match in (Match.EXACT, Match.ROUND) for r in evidence.readings):
        return MISLEADING
    return WRONG


# ---- figures -------------------------------------------------------------------------------------

_FIGURE = re.compile(r"^(\d+(?:\.\d+)?)([KMB%]?)$")
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "%": 1}


@dataclass(frozen=True)
class Figure:
    """A number as an article writes it ("50,000", "38.4M", "15, 204, 000", "60%"): its value (in
    the article's unit: percent for "%"), its significant digits, and the unit of its last digit
    (the precision it is given to)."""

    text: str
    value: Decimal
    digits: int
    unit: Decimal

    def __str__(self) -> str:
        return self.text


def figure(text: str) -> Figure:
    """Parse a figure; thousands separators and spaces are ignored, K/M/B scale, % is kept as percent."""
    match = _FIGURE.match(text.replace(",", "").replace(" ", ""))
    if match is None:
        raise ValueError(f"not a figure: {text!r} (expected digits, an optional decimal part and K, M, B or %)")
    mantissa, suffix = match.groups()
    scale = _SCALE[suffix]
    integer, _, decimals = mantissa.partition(".")
    significant = (integer + decimals).lstrip("0")
    if decimals:
        digits, unit = len(significant), Decimal(scale) / Decimal(10) ** len(decimals)
    else:  # the trailing zeros of a whole number are not significant
        stripped = significant.rstrip("0")
        digits, unit = len(stripped), Decimal(scale) * Decimal(10) ** (len(significant) - len(stripped))
    return Figure(text, Decimal(mantissa) * scale, max(digits, 1), unit)


def compare_figure(stated: Figure, exact: float | int | Decimal) -> Match:
    """EXACT if equal; ROUND if `stated` is `exact` rounded at the stated figure's precision; else NO.
    Nearness alone is not enough: 124M for 123,334,656 is 0.54% off, but that count rounds to 123M."""
    e = Decimal(str(exact))
    if stated.value == e:
        return Match.EXACT
    return Match.ROUND if _rounded(stated, e) == stated.value else Match.NO


def _rounded(stated: Figure, exact: Decimal) -> Decimal:
    """`exact` rounded (half up) at the last digit `stated` is written to."""
    return (exact / stated.unit).quantize(Decimal(1), rounding=ROUND_HALF_UP) * stated.unit


def off(stated: Figure, exact: float | int) -> str:
    """How far a stated figure is from the exact value, in the words of a row ("" when equal)."""
    e = Decimal(str(exact))
    if stated.value == e:
        return ""
    exact_text = f"{exact:,.2f}".rstrip("0").rstrip(".") if isinstance(exact, float) else f"{exact:,}"
    text = f"{stated} is {(stated.value - e) / e:+.2%} from {exact_text}"
    if _rounded(stated, e) != stated.value:  # say what the figure would be, written as precisely
        text += f", which rounds to {_rounded_like(stated, e)}"
    return text


def _rounded_like(stated: Figure, exact: Decimal) -> str:
    """`exact` rounded to the stated figure's last digit and written in its unit ("7.7M" for 7,680,000 as "7.6M")."""
    suffix = stated.text.strip()[-1] if stated.text.strip()[-1] in _SCALE else ""
    scale = Decimal(_SCALE[suffix])
    step = stated.unit / scale  # the last digit, in the figure's unit
    value = (exact / scale / step).quantize(Decimal(1), rounding=ROUND_HALF_UP) * step
    return f"{value:,f}{suffix}" if step < 1 else f"{int(value):,}{suffix}"


def compare_dims(stated: Sequence[int | Figure], exact: Sequence[int]) -> Match:
    """A shape as stated (dimensions may be figures, "[50,000, 768]") against the exact shape."""
    if len(stated) != len(exact):
        return Match.NO
    return worst(
        [compare_figure(s, e) if isinstance(s, Figure) else _equal(s == e) for s, e in zip(stated, exact, strict=True)]
    )


def _equal(same: bool) -> Match:
    return Match.EXACT if same else Match.NO


def compare_equal(stated: object, exact: object) -> Match:
    """EXACT if the stated value equals the exact one, else NO."""
    return _equal(stated == exact)


def compare_arrays(stated: np.ndarray, reference: np.ndarray) -> tuple[Match, float, float]:
    """A stated computation's output against the reference's: EXACT within the float32 tolerance
    (`verifier.analysis.tolerance.bound`). Returns (match, max |diff|, bound)."""
    if np.shape(stated) != np.shape(reference):
        return Match.NO, float("inf"), 0.0
    diff = float(np.max(np.abs(np.asarray(stated, np.float64) - reference), initial=0.0))
    limit = tolerance.bound(np.asarray(reference, np.float64))
    return _equal(diff <= limit), diff, limit


def shape_text(shape: Sequence[object]) -> str:
    """`[5, 768]`, as the articles write shapes."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def because(*parts: str) -> str:
    """The non-empty parts of a row's why, joined with "; "."""
    return "; ".join(p for p in parts if p)
