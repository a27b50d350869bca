"""The float64 oracle of a case, with what the tolerance policy needs to bound each comparison.

Every expected array comes with its neighbours (see `verifier.analysis.tolerance`): the oracle run on
weights nudged at the model's precision (two seeds), the reference run at that precision, and in
bfloat16 and float16 the oracle with its near-ties closed (`Precision.neighbours`). They measure
how sensitive this very case is to rounding, so the bound is tight where the case is well
conditioned and wide only where any correct model of that precision lands far from the oracle.

A MoE config's router may choose its top_k experts on a near-tie (`NearTie`): where a token's chosen
expert and one left out lie within the class's bound for the `router_probs` stage in the oracle, a
correct model of the class may choose either. Its logits are then compared
with the oracle computed with each choice (every combination of the near-ties flipped, through the
reference's routing override; each with its neighbours routed alike), and accepted if one agrees;
the test's record says which near-tie was met (`checks.agree`). The choices away from near-ties stay
the oracle's: a wrong router still fails. A trace's `experts` stage (the experts each token used) may
take either expert of a near-tie, and `localize` follows the choices a trace shows, layer by layer,
before it tries the combinations.

Comparisons are judged at the precision class of the model under test (`verifier.analysis.precision`):
`models.build` calls `judge_at(model.precision)` when it builds the model for an example, and the
oracle, its neighbours and every bound follow. A quantized class's oracle runs on the dequantized
weights. Outside a property (or before a model is built) the class is float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.analysis.agreement import log_softmax
from verifier.analysis.divergence import Divergence, localize
from verifier.analysis.precision import FLOAT32, Precision
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import WeightMap
from verifier.properties.cases import Case, weight_bytes
from verifier.properties.recent import KEPT
from verifier.reference import NumpyModel

_judged_at: list[Precision] = [FLOAT32]


def judge_at(precision: Precision) -> None:
    """Judge the comparisons that follow at `precision` (the model under test's class)."""
    _judged_at[0] = precision


def precision() -> Precision:
    """The precision class comparisons are judged at now."""
    return _judged_at[0]


Neighbours = Callable[[Precision], tuple[np.ndarray, ...]]
# A routing override: per MoE layer, the experts each token uses, [T, top_k] or [B, T, top_k].
Routes = Mapping[int, np.ndarray]
# Near-ties flipped together at most: every combination of up to this many is tried (2^n - 1 oracles).
MAX_NEAR_TIES = 4


@dataclass(frozen=True)
class NearTie:
    """A token whose router probabilities in the oracle put a chosen expert and one left out within the
    class's bound: at MoE layer `layer`, position `position` (of batch row `row`), expert `chosen` (one
    of the oracle's top k) and expert `other` (not among them) lie `gap` apart."""

    layer: int
    row: int | None
    position: int
    chosen: int
    other: int
    gap: float
    bound: float

    def describe(self) -> str:
        row = "" if self.row is None else f"row {self.row}, "
        return (
            f"layer {self.layer}, {row}position {self.position}: experts {self.chosen} and {self.other} "
            f"{self.gap:.3g} apart in probability (bound {self.bound:.3g})"
        )


@dataclass(frozen=True)
class ChoiceComparison(tolerance.Comparison):
    """A comparison accepted against the oracle computed with other expert choices at near-ties."""

    choice: str = ""


_met: dict[str, None] = {}  # the near-ties met since `take_near_ties_met` (an ordered set)


def near_tie_met(what: str) -> None:
    """Keep that a near-tie was met (and how it was judged), for the record of the running test."""
    _met[what] = None


def take_near_ties_met() -> list[str]:
    """The near-ties met since the last call (`checks.recording` puts them in the test's record)."""
    found = list(_met)
    _met.clear()
    return found


def near_ties(probs: np.ndarray, top_k: int, bound: float) -> list[tuple[Any, ...]]:
    """Where a router's choice is a near-tie: for router probabilities [..., T, n_experts], each token
    (index (..., t)) where a chosen expert (among the top_k) and one left out lie at most `bound` apart,
    each such pair with its gap: [(*index, chosen expert, other expert, gap)]. Not only the k-th and the
    (k+1)-th: where three experts lie within the bound, a model of the class may leave out any of them
    (measured: llama.cpp's Q8_0 Qwen3-MoE took the 2nd and 3rd of 0.260, 0.247, 0.239)."""
    if top_k >= probs.shape[-1]:
        return []  # every expert is used: nothing to choose
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    found = []
    for index in zip(*np.nonzero(sorted_probs[..., top_k - 1] - sorted_probs[..., top_k] <= bound), strict=True):
        p, experts = sorted_probs[index], order[index]
        for i in range(top_k - 1, -1, -1):  # the k-th chosen first: the pair the earlier rule named
            for j in range(top_k, len(p)):
                if p[i] - p[j] <= bound:
                    found.append((*index, int(experts[i]), int(experts[j]), float(p[i] - p[j])))
    return found


class Expected:
    """An oracle array and, computed only when the floor of the policy is not enough, its
    neighbours at a precision; `rope_positions` is the largest RoPE position, or 0. The floor is
    relative to `scale` (the sizes its rounding grows with, where those are not the value's own;
    default `value`). An `identity` is what a law gives exactly: only the class's identity floor applies."""

    def __init__(
        self,
        value: np.ndarray,
        neighbours: Neighbours,
        rope_positions: int,
        *,
        precision: Precision = FLOAT32,
        n_layers: int = 1,
        identity: bool = False,
        scale: np.ndarray | None = None,
        ties: Sequence[NearTie] = (),
        choices: Callable[[], list[tuple[str, Expected]]] | None = None,
        follow: Callable[[np.ndarray], tuple[str, Expected] | None] | None = None,
        logits: bool = False,
    ) -> None:
        self.value = value
        self.logits = logits  # every position's logits over the vocabulary (the last axis)
        self._follow = follow  # the choices at near-ties an output [..., T, V] follows, found position by position
        self.ties = tuple(ties)  # the near-ties of the router this value was computed at
        self._choices = choices  # the oracle computed with the other choices at them (`NearTie`)
        self.scale = value if scale is None else scale
        self.rope_positions = rope_positions
        self.precision = precision
        self.n_layers = n_layers
        self.identity = identity
        self._neighbours = neighbours
        self._cache: dict[tuple[str, str], tuple[np.ndarray, ...]] = {}

    def neighbours_at(self, precision: Precision) -> tuple[np.ndarray, ...]:
        if precision.key not in self._cache:
            self._cache[precision.key] = self._neighbours(precision)
        return self._cache[precision.key]

    @property
    def neighbours(self) -> tuple[np.ndarray, ...]:
        return self.neighbours_at(self.precision)

    def bound(self, *, with_neighbours: bool = True, precision: Precision | None = None) -> float:
        """The largest error the class (this value's, or `precision`) allows against this value."""
        p = precision or self.precision
        if self.identity:
            return p.identity_bound(self.scale, rope_positions=self.rope_positions)
        others = self.neighbours_at(p) if with_neighbours else ()
        return p.bound(self.value, others, rope_positions=self.rope_positions, n_layers=self.n_layers, scale=self.scale)

    def compare(
        self,
        actual: np.ndarray,
        *,
        against: np.ndarray | None = None,
        slack: float = 1.0,
        precision: Precision | None = None,
    ) -> tolerance.Comparison:
        """`actual` against this oracle value (or against `against`, another output of the model
        for the same input) under this value's bound times `slack` (at `precision` if given)."""
        error, index = tolerance.worst(actual, self.value if against is None else against)
        floor = slack * self.bound(with_neighbours=False, precision=precision)
        # The neighbours only widen the bound: skip computing them while the error is far below the
        # floor (the ratio reported is then an upper bound, at most 1/4).
        if error <= floor / 4 or self.identity:
            return tolerance.Comparison(error, floor, index)
        found = tolerance.Comparison(error, slack * self.bound(precision=precision), index)
        if found.ok or self._choices is None:
            return found
        return self._with_other_choices(found, actual, against, precision)

    def _with_other_choices(
        self, found: tolerance.Comparison, actual: np.ndarray, against: np.ndarray | None, precision: Precision | None
    ) -> tolerance.Comparison:
        """`found` failed: the comparison with the oracle computed with other choices at the router's
        near-ties, the first that agrees (with `against`, another output of the model, each of the two
        must agree with one of the choices), or `found`."""
        assert self._choices is not None
        followed = [] if self._follow is None else [self._follow(x) for x in (actual, against) if x is not None]
        choices = [("the oracle's choices", self), *(f for f in followed if f is not None), *self._choices()]
        for name, other in choices[1:]:
            c = other.compare(actual, precision=precision) if against is None else None
            if c is not None and c.ok:
                near_tie_met(f"accepted with {name}")
                return ChoiceComparison(c.max_error, c.bound, c.index, choice=name)
        if against is not None:
            mine = next((n for n, e in choices if e.compare(actual, precision=precision).ok), None)
            theirs = next((n for n, e in choices if e.compare(against, precision=precision).ok), None)
            if mine is not None and theirs is not None:
                near_tie_met(f"accepted: the model's two outputs agree with {mine}; and {theirs}")
                return ChoiceComparison(found.max_error, found.max_error, found.index, choice=f"{mine}; and {theirs}")
        return found

    def __getitem__(self, index: Any) -> Expected:
        """The same slice of the value and of every neighbour."""
        choices = self._choices
        value = self.value[index]
        return Expected(
            value,
            lambda p: tuple(n[index] for n in self.neighbours_at(p)),
            self.rope_positions,
            precision=self.precision,
            n_layers=self.n_layers,
            identity=self.identity,
            scale=self.scale[index],
            ties=self.ties,
            choices=None if choices is None else lambda: [(name, e[index]) for name, e in choices()],
            # the choices followed position by position need every position: kept where `index` selects all
            # (a decode's positions, every one), else lost
            follow=self._follow if _selects_all(self.value.shape, index) else None,
            logits=self.logits and value.shape[-1:] == self.value.shape[-1:],
        )

    def log_softmax(self) -> Expected:
        """These logits as log-probabilities, the neighbours' and the other choices' too, under the same
        bound (its scale is the logits'): logits compared up to a constant per position."""
        choices, follow = self._choices, self._follow
        expected = Expected(
            log_softmax(self.value),
            lambda p: tuple(log_softmax(n) for n in self.neighbours_at(p)),
            self.rope_positions,
            precision=self.precision,
            n_layers=self.n_layers,
            scale=self.scale,
            ties=self.ties,
            choices=None if choices is None else lambda: [(name, e.log_softmax()) for name, e in choices()],
            logits=True,
        )
        if follow is not None:

            def followed(actual: np.ndarray) -> tuple[str, Expected] | None:
                found = follow(actual)
                return None if found is None else (found[0], found[1].log_softmax())

            expected._follow = followed
        return expected


def exact(value: np.ndarray, rope_positions: int = 0, *, scale: np.ndarray | None = None) -> Expected:
    """What a law gives exactly (a rotation's norm, an unchanged prefix): the class's identity floor
    applies, relative to max |value|, or to max |scale| where given (a dot product's rounding grows
    with its terms, not with its result, which they may cancel to nearly 0)."""
    value = np.asarray(value, np.float64)
    return Expected(value, lambda p: (), rope_positions, precision=precision(), identity=True, scale=scale)


def _selects_all(shape: tuple[int, ...], index: Any) -> bool:
    """Whether `index` takes every element of an array of `shape` [..., V] in order: probed on the leading
    axes only (a vocabulary axis indexed otherwise than whole is not everything)."""
    marker = np.arange(math.prod(shape[:-1])).reshape(*shape[:-1], 1)
    try:
        taken = marker[index]
    except IndexError:
        return False
    return taken.shape == marker.shape and bool(np.array_equal(taken, marker))


def _tie_subsets(ties: Sequence[NearTie]) -> list[tuple[NearTie, ...]]:
    """The sets of near-ties to flip together: every non-empty subset of at most MAX_NEAR_TIES of them;
    of more, each alone and all together (never the 2^n subsets: a bfloat16 mutant met dozens of near-ties
    and their enumeration alone ran the suite out of memory)."""
    if len(ties) > MAX_NEAR_TIES:
        return [(t,) for t in ties] + [tuple(ties)]
    return [s for n in range(1, len(ties) + 1) for s in itertools.combinations(ties, n)]


def _flipped(routes: Mapping[int, np.ndarray], ties: Sequence[NearTie]) -> dict[int, np.ndarray]:
    """The near-tie layers of `routes` with each of `ties`' tokens using its other expert in place of
    the chosen one."""
    out = {layer: np.array(routes[layer]) for layer in {t.layer for t in ties}}
    for t in ties:
        row = out[t.layer] if t.row is None else out[t.layer][t.row]
        experts = row[t.position]
        if t.chosen in experts and t.other not in experts:  # another tie of the token may have moved it already
            experts[experts == t.chosen] = t.other
    return out


def _either_expert(ties: Sequence[NearTie]) -> dict[tuple[int, int], frozenset[int]]:
    """{(MoE layer, position): the experts of the near-ties there}: the choices a traced `experts` stage
    may make either way (`verifier.analysis.divergence.localize`)."""
    either: dict[tuple[int, int], frozenset[int]] = {}
    for t in ties:
        either[t.layer, t.position] = either.get((t.layer, t.position), frozenset()) | {t.chosen, t.other}
    return either


def _took_other(traced: np.ndarray, own: np.ndarray, tie: NearTie) -> bool:
    """Whether a token's traced experts [k] are the oracle's own [top_k] with `tie`'s other expert in place
    of the one the oracle chose."""
    return set(np.asarray(traced).tolist()) == (set(np.asarray(own).tolist()) - {tie.chosen}) | {tie.other}


class Oracle:
    """The float64 reference for one config and weight set at a precision class, and its neighbours;
    with `stream`, each runs layer by layer from `weights` (a mapped checkpoint too large to hold)."""

    def __init__(
        self, config: ModelConfig, weights: WeightMap, precision: Precision = FLOAT32, *, stream: bool = False
    ) -> None:
        self.config = config
        self.precision = precision
        self.stream = stream
        self.model = NumpyModel(config, precision.oracle_weights(weights), np.float64, stream=stream)
        self.weights = weights
        self._neighbour_models: dict[tuple[str, str], tuple[NumpyModel, ...]] = {}
        self._near_ties: dict[tuple[Any, ...], list[NearTie]] = {}  # per input (tokens, shape, mask)

    def neighbour_models(self, precision: Precision) -> tuple[NumpyModel, ...]:
        """The neighbours at `precision` (`Precision.neighbours`); built on first use: most
        comparisons never need them."""
        if precision.key not in self._neighbour_models:
            self._neighbour_models[precision.key] = precision.neighbours(self.config, self.weights, stream=self.stream)
        return self._neighbour_models[precision.key]

    def _rope_positions(self, n_positions: int) -> int:
        return n_positions - 1 if self.config.uses_rope else 0

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> Expected:
        """Expected logits of tokens [T] or [B, T] (optionally left-padded with a mask); for a MoE config
        whose router meets near-ties, with the oracle computed with the other choices too (`NearTie`)."""
        ties = self.near_ties(tokens, attention_mask)
        if not ties:
            return self._logits(tokens, attention_mask, None)
        chosen = self.routes(tokens, attention_mask)
        subsets = _tie_subsets(ties)

        def choices() -> list[tuple[str, Expected]]:
            return [
                ("the other choice at " + "; ".join(t.describe() for t in flipped),
                 self._logits(tokens, attention_mask, self.routes(tokens, attention_mask, _flipped(chosen, flipped)),
                              ties))
                for flipped in subsets
            ]  # fmt: skip

        def follow(actual: np.ndarray) -> tuple[str, Expected] | None:
            return self._follow(tokens, attention_mask, ties, chosen, actual)

        # every choice pinned (the oracle's own), so that no neighbour flips one at a near-tie
        expected = self._logits(tokens, attention_mask, chosen, ties, choices)
        expected._follow = follow
        return expected

    def _follow(
        self,
        tokens: np.ndarray,
        attention_mask: np.ndarray | None,
        ties: Sequence[NearTie],
        chosen: Routes,
        actual: np.ndarray,
    ) -> tuple[str, Expected] | None:
        """The oracle with the choices at near-ties that `actual` (logits [T, V] or [B, T, V]) follows,
        found position by position as greedy decoding is teacher-forced: at the first position the
        current choices do not explain, each combination of that position's near-ties flipped (a choice
        at position t moves no earlier position); None where none explains it."""
        routes, expected = dict(chosen), self._logits(tokens, attention_mask, chosen, ties)
        flipped: list[NearTie] = []
        for _ in range(len(ties) + 1):
            if np.shape(actual) != np.shape(expected.value):
                return None
            bound = expected.bound()
            diff = np.abs(np.asarray(actual, np.float64) - expected.value).max(-1).reshape(-1, np.shape(tokens)[-1])
            wrong = np.argwhere(~(diff <= bound))  # [row, position], in row-major order
            if len(wrong) == 0:
                return "the other choice at " + "; ".join(t.describe() for t in flipped), expected
            first = min(wrong.tolist(), key=lambda rt: (rt[1], rt[0]))
            here = [t for t in ties if (t.row or 0, t.position) == tuple(first) and t not in flipped]
            for subset in _tie_subsets(here):
                trial = self._reroute(tokens, attention_mask, routes, subset)
                candidate = self._logits(tokens, attention_mask, trial, ties)
                shape = (-1, *candidate.value.shape[-2:])
                row = candidate.value.reshape(shape)[first[0], first[1]]
                found = np.asarray(actual, np.float64).reshape(shape)[first[0], first[1]]
                if np.abs(found - row).max() <= candidate.bound():
                    routes, expected, flipped = trial, candidate, [*flipped, *subset]
                    break
            else:
                return None
        return None

    def _reroute(
        self, tokens: np.ndarray, attention_mask: np.ndarray | None, routes: Routes, flips: Sequence[NearTie]
    ) -> dict[int, np.ndarray]:
        """`routes` with `flips` made: the layers up to the last flipped one as given, each later one
        the oracle's own choice after them from the first flipped position on (earlier positions keep
        theirs: a choice moves no earlier position)."""
        last = max(t.layer for t in flips)
        given = _flipped({layer: r for layer, r in routes.items() if layer <= last}, flips)
        given = {layer: given.get(layer, routes[layer]) for layer in routes if layer <= last}
        after = self.routes(tokens, attention_mask, given)
        start = min(t.position for t in flips)
        out = dict(after)
        for layer, r in routes.items():
            if layer > last:
                out[layer] = np.array(after[layer])
                out[layer][..., :start, :] = np.asarray(r)[..., :start, :]
        return out

    def _logits(
        self,
        tokens: np.ndarray,
        attention_mask: np.ndarray | None,
        routes: Routes | None,
        ties: Sequence[NearTie] = (),
        choices: Callable[[], list[tuple[str, Expected]]] | None = None,
    ) -> Expected:
        """Expected logits with the router's choices at some MoE layers given (`routes`), the
        neighbours' too."""

        def run(model: NumpyModel) -> np.ndarray:
            if routes is None:
                return model.logits(tokens, attention_mask=attention_mask)
            return model.logits(tokens, attention_mask=attention_mask, routes=routes)

        def neighbours(p: Precision) -> tuple[np.ndarray, ...]:
            return tuple(run(m) for m in self.neighbour_models(p))

        return Expected(
            run(self.model),
            neighbours,
            self._rope_positions(np.shape(tokens)[-1]),
            precision=self.precision,
            n_layers=self.config.n_layers,
            ties=ties,
            choices=choices,
            logits=True,
        )

    def near_ties(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> list[NearTie]:
        """The tokens of tokens [T] or [B, T] (padding aside) whose top_k choice is a near-tie at some MoE
        layer: the gap between the k-th and (k+1)-th router probability within the class's bound for
        `router_probs` (its floor and the spread of its neighbours' router probabilities); each one
        met is kept for the running test's record."""
        if self.config.n_experts == 0:
            return []
        key = (np.asarray(tokens).tobytes(), np.shape(tokens), None if attention_mask is None else
               np.asarray(attention_mask).tobytes())  # fmt: skip
        if key not in self._near_ties:
            self._near_ties[key] = self._find_near_ties(tokens, attention_mask)
        for tie in self._near_ties[key]:
            near_tie_met("met at " + tie.describe())
        return self._near_ties[key]

    def _find_near_ties(
        self, tokens: np.ndarray, attention_mask: np.ndarray | None, given: Routes | None = None
    ) -> list[NearTie]:
        """The near-ties of every MoE layer with the choices at the layers `given` made as given (their
        inputs, and the later layers', are those choices'); see `near_ties`."""
        c = self.config
        probs = self.model.router_probs(tokens, attention_mask, routes=given)
        # the neighbours routed as the oracle is: each layer's inputs as the oracle's choices make them
        chosen = self.routes(tokens, attention_mask, given)
        others = [m.router_probs(tokens, attention_mask, routes=chosen) for m in self.neighbour_models(self.precision)]
        real = np.ones(np.shape(tokens), bool) if attention_mask is None else np.asarray(attention_mask, bool)
        found = []
        for layer, p in probs.items():
            bound = self.precision.bound(p, [o[layer] for o in others], n_layers=c.n_layers)
            for *index, kept, other, gap in near_ties(p, c.top_k, bound):
                if real[tuple(index)]:
                    row = None if len(index) == 1 else int(index[0])
                    found.append(NearTie(layer, row, int(index[-1]), kept, other, gap, bound))
        return found

    def routes(
        self, tokens: np.ndarray, attention_mask: np.ndarray | None = None, given: Routes | None = None
    ) -> dict[int, np.ndarray]:
        """{MoE layer: the oracle's top_k experts per token, [T, top_k] or [B, T, top_k]}: those `given`,
        and at every other layer the oracle's own choice after them."""
        probs = self.model.router_probs(tokens, attention_mask, routes=given)
        k = self.config.top_k
        own = {layer: np.argsort(-p, axis=-1, kind="stable")[..., :k] for layer, p in probs.items()}
        return own | dict(given or {})

    def continued(self, tokens: np.ndarray, n_new: int) -> np.ndarray:
        """tokens [T] and the oracle's n_new greedy picks after them, [T + n_new]."""
        for _ in range(n_new):
            tokens = np.append(tokens, int(np.argmax(self.model.logits(tokens)[-1])))
        return tokens

    def localize(
        self, trace: dict[str, np.ndarray], tokens: np.ndarray, *, rope_layout: str = stages.ROTATE_HALF
    ) -> Divergence:
        """Where a model's trace of `tokens` [T] first departs from the oracle's; `rope_layout` is the
        order of q/k the model declares (`CheckedModel.rope_layout`: its trace is already reordered
        from it, and a q/k stage that matches only in the other order says so). The oracle's trace and
        its neighbours' are streamed a layer at a time (at full size, all stages of all layers of four
        traces would not fit: GPT-2 124M's attention scores and probabilities of 1,024 tokens are 2.4 GB
        a trace)."""
        c = self.config
        compare = partial(
            localize,
            trace,
            rope_positions=self._rope_positions(len(tokens)),
            precision=self.precision,
            n_layers=c.n_layers,
            family=c.family,
            rope_layout=rope_layout,
        )
        floor_only = compare(self.model.trace_layers(tokens))
        if max((s.ratio for s in floor_only.stages), default=0.0) <= 0.25:  # as in Expected.compare
            return floor_only
        if c.n_experts:  # a token may choose either expert of a near-tie: its `experts` stage may differ there
            compare = partial(compare, near_ties=_either_expert(self.near_ties(tokens)))
        found = compare(
            self.model.trace_layers(tokens), [m.trace_layers(tokens) for m in self.neighbour_models(self.precision)]
        )
        if found.first is None or c.n_experts == 0:
            return found
        return self._localize_other_choices(found, compare, trace, tokens)

    def _localize_other_choices(
        self, found: Divergence, compare: Callable[..., Divergence], trace: Mapping[str, np.ndarray], tokens: np.ndarray
    ) -> Divergence:
        """`found` departs: the trace compared with the oracle's computed with other choices at the
        router's near-ties (`NearTie`): first the choices its `experts` stages show the model took
        (`_traced_choices`), then each set of `_tie_subsets`; the first with no divergent stage, or `found`."""
        routes, taken, met = self._traced_choices(trace, tokens)
        if taken:
            other = self._routed(compare, tokens, routes, met)
            if other.first is None:
                near_tie_met("trace accepted with the model's own choice at " + "; ".join(t.describe() for t in taken))
                return other
        ties = self.near_ties(tokens)
        chosen = self.routes(tokens)
        for flipped in _tie_subsets(ties):
            other = self._routed(compare, tokens, self.routes(tokens, given=_flipped(chosen, flipped)), ties)
            if other.first is None:
                near_tie_met("trace accepted with the other choice at " + "; ".join(t.describe() for t in flipped))
                return other
        return found

    def _routed(
        self, compare: Callable[..., Divergence], tokens: np.ndarray, routes: Routes, ties: Sequence[NearTie]
    ) -> Divergence:
        """The trace compared with the oracle's and its neighbours' computed with `routes` (every MoE layer's),
        either expert of each of `ties` (the near-ties along those routes) accepted at the `experts` stages."""
        return compare(
            self.model.trace_layers(tokens, routes=routes),
            [m.trace_layers(tokens, routes=routes) for m in self.neighbour_models(self.precision)],
            near_ties=_either_expert(ties),
        )

    def _traced_choices(
        self, trace: Mapping[str, np.ndarray], tokens: np.ndarray
    ) -> tuple[dict[int, np.ndarray], list[NearTie], list[NearTie]]:
        """The choices a model's trace of tokens [T] shows it made at near-ties, followed layer by layer (a
        choice moves the later layers' inputs, and with them their near-ties): at each MoE layer the oracle's
        own choice after the earlier layers' routes, with the other expert wherever the trace's `experts` took
        it at a near-tie. Returns those routes ({layer: [T, top_k]}), the near-ties where the model took the
        other expert, and every near-tie met along the routes."""
        routes: dict[int, np.ndarray] = {}
        taken: list[NearTie] = []
        met: list[NearTie] = []
        for layer in (i for i in range(self.config.n_layers) if self.config.is_moe_layer(i)):
            here = [t for t in self._find_near_ties(tokens, None, routes) if t.layer == layer]
            own = self.routes(tokens, given=routes)[layer]
            traced = trace.get(stages.layer_stage(layer, "experts"))
            took = [t for t in here if traced is not None and _took_other(traced[t.position], own[t.position], t)]
            routes[layer] = _flipped({layer: own}, took)[layer] if took else own
            taken, met = taken + took, met + here
        return routes, taken, met

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        return self.model.trace(tokens)

    def quantized_logits(self, tokens: np.ndarray) -> tuple[np.ndarray, ...]:
        """Logits of what correct models of this (quantized) class compute on tokens [T]: the oracle on
        the dequantized weights, the class emulation, and the oracle nudged at the class's eps (two
        seeds); how far these move from the original weights is what quantizing may cost."""
        return (self.model.logits(tokens), *(m.logits(tokens) for m in self.neighbour_models(self.precision)))

    @cached_property
    def original(self) -> NumpyModel:
        """The float64 reference on the weights as given (for a quantized class: not dequantized)."""
        if not self.precision.quantized:
            return self.model
        return NumpyModel(self.config, self.weights, np.float64, stream=self.stream)


def oracle(case: Case) -> Oracle:
    """The oracle of `case`'s config and weights at the precision judged now, remembered while recent (the
    next model meets the same cases); a checkpoint too large to hold in float64 streams
    (`FixedCheckpoint.streams`)."""
    p = precision()

    def make() -> Oracle:
        stream = case.checkpoint is not None and case.checkpoint.streams
        return Oracle(case.config, case.weights(), p, stream=stream)

    # once a bound is asked for, an oracle holds two float64 perturbed copies of its weights: 4x their float32
    # bytes (the weights themselves are kept, and counted, under their own key by `Case.weights`)
    key = ("oracle", case.config, case.seed, case.scale, case.checkpoint, p.key)
    return KEPT.get(key, make, lambda o: 4 * weight_bytes(o.weights))
