"""The float64 oracle of a case, with what the tolerance policy needs to bound each comparison.

Every expected array comes with its neighbours (see `verifier.analysis.tolerance`): the oracle run on
weights nudged at the model's precision (two seeds), the reference run at that precision, and in
bfloat16 and float16 the oracle with its near-ties closed (`Precision.neighbours`). They measure
how sensitive this very case is to rounding, so the bound is tight where the case is well
conditioned and wide only where any correct model of that precision lands far from the oracle.

Comparisons are judged at the precision class of the model under test (`verifier.analysis.precision`):
`models.build` calls `judge_at(model.precision)` when it builds the model for an example, and the
oracle, its neighbours and every bound follow. A quantized class's oracle runs on the dequantized
weights. Outside a property (or before a model is built) the class is float32.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.analysis.divergence import Divergence, localize
from verifier.analysis.precision import FLOAT32, Precision
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import WeightMap
from verifier.plugin.checkpoint import FixedCheckpoint
from verifier.properties.strategies import Case
from verifier.reference import NumpyModel

_judged_at: list[Precision] = [FLOAT32]


def judge_at(precision: Precision) -> None:
    """Judge the comparisons that follow at `precision` (the model under test's class)."""
    _judged_at[0] = precision


def precision() -> Precision:
    """The precision class comparisons are judged at now."""
    return _judged_at[0]


Neighbours = Callable[[Precision], tuple[np.ndarray, ...]]


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
    ) -> None:
        self.value = value
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
        return tolerance.Comparison(error, slack * self.bound(precision=precision), index)

    def __getitem__(self, index: Any) -> Expected:
        """The same slice of the value and of every neighbour."""
        return Expected(
            self.value[index],
            lambda p: tuple(n[index] for n in self.neighbours_at(p)),
            self.rope_positions,
            precision=self.precision,
            n_layers=self.n_layers,
            identity=self.identity,
            scale=self.scale[index],
        )


def exact(value: np.ndarray, rope_positions: int = 0, *, scale: np.ndarray | None = None) -> Expected:
    """What a law gives exactly (a rotation's norm, an unchanged prefix): the class's identity floor
    applies, relative to max |value|, or to max |scale| where given (a dot product's rounding grows
    with its terms, not with its result, which they may cancel to nearly 0)."""
    value = np.asarray(value, np.float64)
    return Expected(value, lambda p: (), rope_positions, precision=precision(), identity=True, scale=scale)


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
        self._weights = weights
        self._neighbour_models: dict[tuple[str, str], tuple[NumpyModel, ...]] = {}

    def neighbour_models(self, precision: Precision) -> tuple[NumpyModel, ...]:
        """The neighbours at `precision` (`Precision.neighbours`); built on first use: most
        comparisons never need them."""
        if precision.key not in self._neighbour_models:
            self._neighbour_models[precision.key] = precision.neighbours(self.config, self._weights, stream=self.stream)
        return self._neighbour_models[precision.key]

    def _rope_positions(self, n_positions: int) -> int:
        return n_positions - 1 if self.config.uses_rope else 0

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> Expected:
        """Expected logits of tokens [T] or [B, T] (optionally left-padded with a mask)."""
        value = self.model.logits(tokens, attention_mask=attention_mask)

        def neighbours(p: Precision) -> tuple[np.ndarray, ...]:
            return tuple(m.logits(tokens, attention_mask=attention_mask) for m in self.neighbour_models(p))

        return Expected(
            value,
            neighbours,
            self._rope_positions(np.shape(tokens)[-1]),
            precision=self.precision,
            n_layers=self.config.n_layers,
        )

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
        return compare(
            self.model.trace_layers(tokens), [m.trace_layers(tokens) for m in self.neighbour_models(self.precision)]
        )

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
        return NumpyModel(self.config, self._weights, np.float64, stream=self.stream)


_last: dict[tuple[ModelConfig, int, float, FixedCheckpoint | None, tuple[str, str]], Oracle] = {}


def oracle(case: Case) -> Oracle:
    """The oracle of `case`'s config and weights at the precision judged now, remembered for the last
    case; a checkpoint too large to hold in float64 streams (`FixedCheckpoint.streams`)."""
    p = precision()
    key = (case.config, case.seed, case.scale, case.checkpoint, p.key)
    if key not in _last:
        _last.clear()
        stream = case.checkpoint is not None and case.checkpoint.streams
        _last[key] = Oracle(case.config, case.weights(), p, stream=stream)
    return _last[key]
