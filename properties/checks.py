"""Assertion helpers of the property suite: one message format, and what each test records.

Every numeric check goes through `agree`, which compares under the tolerance policy and

- records error / bound, so the test leaves ("worst_error_ratio", max over its examples) in
  `item.user_properties` (`verifier.properties.harness.judged`, which the suite's hook runs);
- on failure, raises a PropertyFailure (an AssertionError) that says the property, the model, what was compared,
  the largest error and where, found and expected values, the bound and the ratio; and, when the
  model can trace, the first divergent stage (recorded as ("first_divergent_stage", stage) and
  ("stage_errors", [(stage, max error, bound), ...]) for the report and its plot).

The reproducible case is printed by Hypothesis from the `note()` that `models.build` makes.

Each test also counts the examples it ran on the model (`record_example`, from `models.build`) and
the checks it made (`agree`, `record_ratio`, or `compared()` for a check made by other means). A
test of a model that checked nothing passes as a skip with its reasons (`nothing_compared`, the
refusals of `record_refusal`): a pass always means the model was checked.

    checks.agree(model.logits(tokens), oracle.logits(tokens), what="logits", model=model)

is equivalent to `assert max|found - expected| <= bound`, with the message and the records.

Bounds are those of the model's precision class (`verifier.analysis.precision`), which `judge_at`
sets when the model is built for an example; every failure message names the class. A model that
declares no class is float32; when one of its checks against the oracle fails, `agree` also says
which coarser floating class it behaves like, where its error is that class's rounding
(`verifier.analysis.precision.rounding_fit`: the size of the error of the reference rounded to the
class, and in part its direction, at every position and, when the model traces, at every stage)
and within that class's bound; recorded, from the failure the test reports, as ("behaves_like",
class). Otherwise it says nothing about precision: a bug's error starts at one stage, or
concentrates at some positions, as rounding's does not.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from hypothesis import note, reject
from hypothesis.control import currently_in_test_context

from verifier.analysis.agreement import log_softmax
from verifier.analysis.divergence import DecodeDivergence, Divergence, DivergentChunk, localize
from verifier.analysis.precision import EMULATION, FLOAT32, HINT_CLASSES, Precision, closest, rounding_fit
from verifier.model.stages import is_index_stage
from verifier.plugin.contract import CheckedModel, ContractViolation
from verifier.plugin.interface import Deviation
from verifier.properties import oracle as oracles
from verifier.properties.cases import Case
from verifier.properties.oracle import Expected, Oracle

__all__ = [
    "Localizer",
    "PropertyFailure",
    "Record",
    "agree",
    "compared",
    "decode_localizer",
    "decode_positions",
    "fail",
    "judge_at",
    "localizer",
    "nothing_compared",
    "record_example",
    "record_failure",
    "record_ratio",
    "record_refusal",
    "recording",
    "top_token",
    "trace_agrees",
]


@dataclass
class Record:
    """What one property test leaves for the report.

    `examples` counts the cases a model was built for and run on; `comparisons` the checks made
    (each `agree`, each recorded ratio, each `compared()`). A model's property that made no
    comparison is a skip, never a pass: `uncompared` and `refused` hold the reasons for saying so
    (`refused`: cases the model refused, or that lay outside what it runs; `by_model`: those the model
    itself refused after it was built or asked, the ones worth naming when other cases did run).
    """

    property: str
    worst_ratio: float | None = None
    first_divergent_stage: str | None = None
    stage_errors: list[tuple[str, float, float]] = field(default_factory=list)
    contract_rule: str | None = None
    examples: int = 0
    comparisons: int = 0
    uncompared: dict[str, None] = field(default_factory=dict)  # an ordered set of reasons
    refused: dict[str, None] = field(default_factory=dict)
    by_model: dict[str, None] = field(default_factory=dict)
    precision: str | None = None  # the class the model was judged at
    behaves_like: str | None = None  # an undeclared model's reported failure follows this class's rounding
    message: str | None = None  # of a group of failures, the one reported (see `record_failure`)
    near_ties: dict[str, None] = field(default_factory=dict)  # router near-ties met, and how each was judged
    declared: tuple[Deviation, ...] = ()  # the model's declared deviations (set by the conftest hook)
    last_ratio: float | None = None  # of the latest comparison: the size of a failure it raises
    deviated: dict[str, list[float]] = field(default_factory=dict)  # a declared deviation's reason -> [largest, n]
    families: dict[str, None] = field(default_factory=dict)  # the families of the models compared
    case: str = ""  # the latest case a model was built for (`Case.describe`): a first failure's, before shrinking

    def deviation_note(self) -> str | None:
        """`deviates (declared): reason; measured up to 1.02x the bound in 3 examples`, if one happened."""
        if not self.deviated:
            return None
        parts = [f"{reason}; measured up to {size:.3g}x the bound in {int(n)} example{'s' if n != 1 else ''}"
                 for reason, (size, n) in self.deviated.items()]  # fmt: skip
        return "deviates (declared): " + " | ".join(parts)

    def deviations_not_seen(self) -> list[str]:
        """The declared deviations of this property on the families it compared, that did not happen."""
        return [
            d.reason
            for d in self.declared
            if d.property == self.property and set(d.families) & set(self.families) and d.reason not in self.deviated
        ]

    def why_nothing_compared(self, model: str) -> str:
        """The skip reason of a property that ran `examples` cases on `model` and compared nothing."""
        if self.examples == 0:
            reason = f"no example ran on model {model!r}"
            if self.refused:
                reason += ": every drawn config was refused (" + "; ".join(_first(self.refused)) + ")"
            return reason
        reasons = list(_first(self.uncompared))
        if self.by_model:  # e.g. built, then every prompt refused by the model
            reasons.append("refused: " + "; ".join(_first(self.by_model)))
        why = "; ".join(reasons) or "the property found nothing to check"
        return f"compared nothing in {self.examples} examples on model {model!r}: {why}"

    def user_properties(self) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = [("examples", self.examples)]
        if self.worst_ratio is not None:
            found.append(("worst_error_ratio", self.worst_ratio))
        if self.first_divergent_stage is not None:
            found.append(("first_divergent_stage", self.first_divergent_stage))
            found.append(("stage_errors", self.stage_errors))
        if self.contract_rule is not None:
            found.append(("contract_rule", self.contract_rule))
        if self.precision is not None:
            found.append(("precision", self.precision))
        if self.behaves_like is not None:
            found.append(("behaves_like", self.behaves_like))
        if self.message is not None:
            found.append(("failure_message", self.message))
        if self.near_ties:
            found.append(("near_ties", self.near_tie_summary() + "\n" + "; ".join(_first(self.near_ties))))
        if not self.deviated and (not_seen := self.deviations_not_seen()):
            found.append(("deviation_not_seen", "; ".join(not_seen)))
        return found

    def near_tie_summary(self) -> str:
        """`2 router near-ties met; either choice accepted, the other one taken in 1 comparison`: how many
        near-ties the property met and how they were judged (`near_ties` holds each "met at ..." and each
        "... accepted ..." that `verifier.properties.oracle` kept)."""
        met = sum(what.startswith("met at ") for what in self.near_ties)
        other = sum("accepted" in what for what in self.near_ties)
        judged = (
            f"the other one taken in {other} comparison{'s' if other != 1 else ''}"
            if other
            else "the other one never taken"
        )
        return f"{met} router near-tie{'s' if met != 1 else ''} met; either choice accepted, {judged}"


def _first(reasons: dict[str, None], n: int = 3) -> list[str]:
    """The first `n` distinct reasons, and how many more there were."""
    shown = list(reasons)[:n]
    return shown + ([f"and {len(reasons) - n} more"] if len(reasons) > n else [])


_records: list[Record] = []


@contextmanager
def recording(property_name: str) -> Iterator[Record]:
    """Collect what the checks of one test record (used by the conftest hook)."""
    record = Record(property_name)
    _records.append(record)
    before = oracles.precision()
    oracles.judge_at(FLOAT32)  # until a model is built for an example
    oracles.take_near_ties_met()  # those of an earlier test are not this one's
    try:
        yield record
    finally:
        record.near_ties |= dict.fromkeys(oracles.take_near_ties_met())
        _records.remove(record)
        # The class of the test's last model is put back: an oracle asked for after it (a test of the
        # library, a replayed record's base) is not judged at a q8_0 model's class.
        oracles.judge_at(before)


def _current() -> Record | None:
    return _records[-1] if _records else None


def property_name() -> str:
    record = _current()
    return record.property if record else "property"


def judge_at(model: CheckedModel, case: Case | None = None) -> None:
    """Judge what follows at `model`'s precision class; reject `case` (Hypothesis draws another)
    where the oracle's values exceed what the class's format can hold (float16 beyond 65,504).
    Without a case (a test of fixed inputs, not drawn), only the class is set."""
    oracles.judge_at(model.precision)
    record = _current()
    if record is not None:
        record.precision = model.precision.label
        record.last_ratio = None  # a new example: a failure's size is of its own comparisons
    if case is not None:
        reject_out_of_range(model, case, case.token_array())


def reject_out_of_range(model: CheckedModel, case: Case, tokens: np.ndarray) -> None:
    """Reject `case` (Hypothesis draws another) where the oracle's values over `tokens` [T] (the case's
    own, or the longer sequence a property runs, e.g. a prompt and its greedy picks) exceed what the
    model's class can hold."""
    if math.isinf(model.precision.max_value):
        return
    reason = model.precision.out_of_range(oracles.oracle(case).trace(tokens), case.config.d_head)
    if reason is not None:
        note(f"outside the model's precision class: {reason}")
        record_refusal(f"a case outside {model.precision.name}'s range ({reason})")
        reject()


def record_example(case: str = "") -> None:
    """Count one case run on the model under test (called where a model is built for a case, `case` its
    description)."""
    record = _current()
    if record is not None:
        record.examples += 1
        record.case = case or record.case


def record_refusal(reason: str, *, by_model: bool = True) -> None:
    """Keep why a case was refused (by the model, or as outside the shapes it runs), for the reason of a skip."""
    record = _current()
    if record is not None:
        record.refused[reason] = None
        if by_model:
            record.by_model[reason] = None


def compared() -> None:
    """Count one check made by a property's own means (a shape, a token, a changed row)."""
    record = _current()
    if record is not None:
        record.comparisons += 1


def nothing_compared(reason: str) -> None:
    """Say why this example checked nothing (e.g. the trace has no `probs` stage); if no example
    of the test checks anything, the test is a skip with these reasons."""
    record = _current()
    if record is not None:
        record.uncompared[reason] = None


def record_ratio(ratio: float) -> None:
    """Keep the largest error / bound of the running test; each call is one comparison."""
    compared()
    record = _current()
    if record is not None and not np.isnan(ratio):
        ratio = float(ratio)  # never NumPy's: pytest-xdist's channel refuses to send a numpy.float64
        record.worst_ratio = ratio if record.worst_ratio is None else max(record.worst_ratio, ratio)
        record.last_ratio = ratio


class PropertyFailure(AssertionError):
    """A property's verdict on a model; `divergence` is the trace comparison that localized it, and
    `behaves_like` the class whose rounding the error follows (a model that declares none)."""

    def __init__(self, message: str, divergence: Divergence | None = None, behaves_like: str | None = None) -> None:
        super().__init__(message)
        self.divergence = divergence
        self.behaves_like = behaves_like


def record_failure(record: Record, error: BaseException) -> None:
    """Put the localization of the failure a test reports (`error`, or the first PropertyFailure in
    an exception group) into `record`. Taken from the raised error, not from the last example run:
    Hypothesis may run other failing examples after the one it reports."""
    violation = _first_of(error, ContractViolation)
    if violation is not None:
        record.contract_rule = violation.rule
    failure = _first_of(error, PropertyFailure)
    if failure is not None:
        record.behaves_like = failure.behaves_like  # the reported failure's, as its message says
    if isinstance(error, BaseExceptionGroup):  # Hypothesis' distinct failures: pytest shows the group's title
        reported: BaseException = failure or violation or error
        while isinstance(reported, BaseExceptionGroup):
            reported = reported.exceptions[0]
        record.message = "".join(traceback.format_exception_only(reported)).strip() + (
            f"\n(the first of {len(error.exceptions)} distinct failures Hypothesis found)"
        )
    if failure is not None and failure.divergence is not None and failure.divergence.first is not None:
        record.first_divergent_stage = failure.divergence.first.stage
        record.stage_errors = failure.divergence.as_rows()


E = TypeVar("E", bound=BaseException)


def _first_of(error: BaseException, kind: type[E]) -> E | None:
    """`error` if it is a `kind`, else the first `kind` in an exception group, else None."""
    if isinstance(error, kind):
        return error
    for inner in getattr(error, "exceptions", ()):  # an ExceptionGroup of several distinct failures
        found = _first_of(inner, kind)
        if found is not None:
            return found
    return None


def fail(
    model: CheckedModel | str,
    what: str,
    detail: str,
    divergence: Divergence | None = None,
    *,
    behaves_like: str | None = None,
) -> None:
    """Raise the suite's failure: `<property>: model 'x' (<precision class>), <what>: <detail>`."""
    __tracebackhide__ = True
    name = model if isinstance(model, str) else model.name
    label = oracles.precision().label if isinstance(model, str) else model.precision.label
    if not isinstance(model, str):
        _declared_deviation(model)
    raise PropertyFailure(f"{property_name()}: model {name!r} ({label}), {what}: {detail}", divergence, behaves_like)


def _declared_deviation(model: CheckedModel) -> None:
    """If `model` declares this failure (its property, its config's family, within `up_to` times the bound),
    record its size and reject the example (Hypothesis goes on drawing others); else return."""
    record = _current()
    if record is None:
        return
    size = record.last_ratio if record.last_ratio is not None else math.inf
    for deviation in record.declared:
        if deviation.covers(record.property, model.config.family) and size <= deviation.up_to:
            largest, n = record.deviated.get(deviation.reason, [0.0, 0])
            record.deviated[deviation.reason] = [max(largest, size), n + 1]
            note(f"deviates (declared): {deviation.reason} ({size:.3g}x the bound)")
            reject()


def _at(array: np.ndarray, index: tuple[int, ...]) -> str:
    return f"{float(np.asarray(array)[index]):.6g}" if index else "-"


def agree(
    found: np.ndarray,
    expected: Expected,
    *,
    what: str,
    model: CheckedModel | str,
    against: np.ndarray | None = None,
    slack: float = 1.0,
    localize: Callable[[], Divergence | None] | None = None,
) -> float:
    """Assert `found` is within the bound of `expected` (the oracle's) and return error / bound.

    With `against`, `found` is compared with that other output of the model for the same input
    (chunked vs full, a row vs the batch...), under the oracle's bound times `slack`. `localize`
    is called on failure to name the first divergent stage.
    """
    __tracebackhide__ = True
    if against is None and expected.logits and isinstance(model, CheckedModel) and model.logits_up_to_a_constant:
        # Defined up to a constant per position (declared): compared as log-probabilities.
        found, expected = log_softmax(found), expected.log_softmax()
        what += " (as log-probabilities: its logits are declared up to a constant per position)"
    c = expected.compare(found, against=against, slack=slack)
    record_ratio(c.ratio)
    record = _current()
    if record is not None and isinstance(model, CheckedModel):
        record.families[model.config.family] = None
    if expected.ties and currently_in_test_context():  # Hypothesis prints notes with the failing example
        note("router near-ties: " + "; ".join(t.describe() for t in expected.ties))
        if isinstance(c, oracles.ChoiceComparison):
            note(f"{what}: accepted with {c.choice}")
    if c.ok:
        return c.ratio
    reference = expected.value if against is None else against
    tried = f" (and with the other choices at {len(expected.ties)} router near-ties)" if expected.ties else ""
    source = "the oracle" if against is None else "the model's own output"
    detail = (
        f"max |diff| {c.max_error:.3g} at {list(c.index)} (found {_at(found, c.index)}, "
        f"{source} {_at(reference, c.index)}) exceeds the {expected.precision.label} tolerance {c.bound:.3g} "
        f"({c.ratio:.3g}x the bound){tried}"
    )
    divergence = localize() if localize is not None else None
    like = None
    undeclared = isinstance(model, CheckedModel) and not model.precision_declared
    # A model that traces shows its stages, and the hint needs them: a check that did not localize gives none.
    stages_shown = divergence is not None or (isinstance(model, CheckedModel) and "trace" not in model.capabilities)
    if undeclared and stages_shown and not expected.identity and against is None:
        like, hint = _behaves_like(found, expected, divergence, localize)
        detail += hint
    if divergence is not None:
        detail += ("\nfirst divergent stage: " if divergence.first else "\n") + divergence.describe()
    fail(model, what, detail, divergence, behaves_like=like)
    return c.ratio


def _behaves_like(
    found: np.ndarray,
    expected: Expected,
    divergence: Divergence | None,
    localize: Callable[[], Divergence | None] | None,
) -> tuple[str | None, str]:
    """For an undeclared (float32) model's failed comparison with the oracle: the one floating class
    (`HINT_CLASSES`) whose rounding its error follows (`rounding_fit`, position by position and, when
    it traced, stage by stage; the nearest emulation where tf32 and float16 both do) and whose bound
    holds it, and what the message says of it; (None, "") when no class's does. A comparison with the
    model's own output, or an exact law, has no emulated error to follow: no hint (nor, for a model
    that traces, a check made without localizing: its logits alone can look like rounding, as float16
    accumulation's look like tf32's, where its stages would not)."""
    fits = []
    for p in HINT_CLASSES:
        c = expected.compare(found, precision=p)
        if not (c.ok and math.isfinite(c.bound)):  # an infinite bound: the emulation overflowed (float16's range)
            continue
        emulated = expected.neighbours_at(p)[EMULATION]
        stages = emulated_stages = None
        if divergence is not None:
            stages = {s.stage: (math.inf if s.problem else s.max_error) for s in divergence.stages}
            emulated_stages = localize.emulated_stages(p) if isinstance(localize, Localizer) else None
        fit = rounding_fit(p, found, expected.value, emulated, stages, emulated_stages)
        if fit is not None:
            fits.append((fit, c))
    best = closest([fit for fit, _ in fits])
    if best is None:
        return None, ""
    c = next(c for fit, c in fits if fit is best)
    p = best.precision
    traced = " and at every traced stage" if divergence is not None else ""
    return p.label, (
        f"; its error is {p.label}'s rounding (the size of the error of the reference rounded to {p.label}, "
        f"{best.median:.2g}x, at every position{traced}) and within the {p.label} tolerance {c.bound:.3g} "
        f"({c.ratio:.3g}x): the model declares no precision and behaves like {p.label} here (if it computes in "
        f"{p.label}, declare precision = {p.name!r})"
    )


def top_token(
    model: CheckedModel, row: np.ndarray, token: int, bound: float, *, what: str, source: str = "the oracle"
) -> None:
    """Assert `token` is the argmax of `row` (logits [V] from `source`) up to a tie within `bound`;
    records shortfall / bound."""
    __tracebackhide__ = True
    best = int(np.argmax(row))
    shortfall = float(row[best] - row[token])
    record_ratio(shortfall / bound if bound > 0 else float(shortfall > 0) * np.inf)
    if shortfall > bound:
        fail(
            model,
            what,
            f"picked {token} ({source}'s logit {row[token]:.6g}) where {source}'s argmax is {best} "
            f"(logit {row[best]:.6g}): {shortfall:.3g} apart, beyond the {model.precision.label} tolerance "
            f"{bound:.3g} for a tie",
        )


class Localizer:
    """What `agree` calls on failure: the model's trace of `tokens` [T] against the oracle's, when it
    traces; and, for the hint of a model that declares no class, how far the class emulations' traces
    lie from the oracle's."""

    def __init__(self, model: CheckedModel, oracle: Oracle, tokens: np.ndarray) -> None:
        self.model, self.oracle, self.tokens = model, oracle, tokens

    def __call__(self) -> Divergence | None:
        if "trace" not in self.model.capabilities:
            return None
        return self.oracle.localize(self.model.trace(self.tokens), self.tokens, rope_layout=self.model.rope_layout)

    def emulated_stages(self, precision: Precision) -> dict[str, float]:
        """{stage: max |error|} of `precision`'s emulation (the reference run at the class) against
        the oracle, over the same tokens (the oracle's trace streamed a layer at a time)."""
        emulation = self.oracle.neighbour_models(precision)[EMULATION]
        found = localize(emulation.trace(self.tokens), self.oracle.model.trace_layers(self.tokens), precision=precision)
        # the chosen experts are indices: their "error" counts tokens, no rounding's size to fit
        return {s.stage: s.max_error for s in found.stages if not is_index_stage(s.stage)}


def localizer(model: CheckedModel, oracle: Oracle, tokens: np.ndarray) -> Localizer:
    """What `agree` calls on failure to name the first divergent stage (`Localizer`)."""
    return Localizer(model, oracle, tokens)


def decode_positions(model: CheckedModel, chunks: Sequence[int], cached: int = 0) -> list[tuple[int, int]]:
    """(chunk index, position) of each row a decode of `chunks` after a cache of `cached` tokens gives:
    every position of each chunk, or its last for a model that gives the last position's logits."""
    rows, start = [], cached
    for index, n in enumerate(chunks):
        rows += [(index, p) for p in range(start if model.every_position else start + n - 1, start + n)]
        start += n
    return rows


def decode_localizer(
    model: CheckedModel,
    oracle: Oracle,
    tokens: np.ndarray,
    chunks: Sequence[int],
    found: np.ndarray,
    expected: Expected,
    *,
    cached: int = 0,
) -> Callable[[], Divergence | None]:
    """What `agree` calls when logits decoded in `chunks` (after a cache of the first `cached` of
    `tokens` [T] or [B, T], or from none) depart from the oracle's: `found` [..., n, V] against
    `expected` (the rows of `decode_positions`) gives the first divergent chunk and position; then
    the full pass `logits(tokens)` at the same positions, where the model has it. If it agrees with
    the oracle, the divergence is decode's own and the trace (a full pass) is not consulted; else
    the trace localizes it, of the batch row that diverged first."""

    def localize() -> Divergence | None:
        rows = decode_positions(model, chunks, cached)
        positions = [p for _, p in rows]
        chunk = _first_divergent_chunk(found, expected, rows, tuple(chunks), cached)
        full_pass = None if model.lacks("logits") else expected.compare(model.logits(tokens)[..., positions, :]).ratio
        trace = None
        if full_pass is None or full_pass > 1.0:
            sequence = tokens if tokens.ndim == 1 or chunk is None or chunk.row is None else tokens[chunk.row]
            trace = localizer(model, oracle, sequence)()
        return DecodeDivergence(
            trace.stages if trace else (),
            trace.untraced if trace else (),
            expected.precision.label,
            chunk=chunk,
            full_pass=full_pass,
            traced=trace is not None,
        )

    return localize


def _first_divergent_chunk(
    found: np.ndarray, expected: Expected, rows: list[tuple[int, int]], chunks: tuple[int, ...], cached: int
) -> DivergentChunk | None:
    """The first chunk with a row of `found` [..., n, V] beyond the bound `agree` applied to it."""
    bound = expected.compare(found).bound
    n, V = found.shape[-2:]
    f = np.asarray(found, np.float64).reshape(-1, n, V)
    diff = np.where(np.isnan(f), np.inf, np.abs(f - np.asarray(expected.value, np.float64).reshape(-1, n, V)))
    beyond = diff.max(-1) > bound  # [batch rows, n]
    divergent = np.flatnonzero(beyond.any(0))
    if divergent.size == 0:
        return None
    first = int(divergent[0])
    index = rows[first][0]
    batch_row = int(np.argmax(beyond[:, first]))
    return DivergentChunk(
        chunks=chunks,
        index=index,
        start=cached + sum(chunks[:index]),
        compared=sum(1 for i, _ in rows if i == index),
        positions=tuple(rows[r][1] for r in divergent if rows[r][0] == index),
        max_error=float(diff[batch_row, first].max()),
        bound=bound,
        token=int(np.argmax(diff[batch_row, first])),
        row=batch_row if found.ndim > 2 else None,
    )


def trace_agrees(divergence: Divergence, *, what: str, model: CheckedModel) -> None:
    """Assert every stage of a localized trace is within its bound; records each stage's ratio."""
    __tracebackhide__ = True
    for stage in divergence.stages:
        record_ratio(stage.ratio)
    if divergence.first is not None:
        fail(model, what, "first divergent stage: " + divergence.describe(), divergence)
