"""The float64 oracle of a case, with what the tolerance policy needs to bound each comparison.

Every expected array comes with its neighbours (see `verifier.analysis.tolerance`): the oracle run on
weights nudged at float32 precision (two seeds), and the reference run in float32. They measure how
sensitive this very case is to rounding, so the bound is tight where the case is well
conditioned and wide only where any correct float32 model lands far from the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.analysis.divergence import Divergence, localize
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters.reference import build_float64
from verifier.properties.strategies import Case
from verifier.reference import NumpyModel


class Expected:
    """An oracle array and, computed only when the floor of the policy is not enough, its
    neighbours; `rope_positions` is the largest RoPE position, or 0."""

    def __init__(
        self, value: np.ndarray, neighbours: Callable[[], tuple[np.ndarray, ...]], rope_positions: int
    ) -> None:
        self.value = value
        self.rope_positions = rope_positions
        self._neighbours = neighbours

    @cached_property
    def neighbours(self) -> tuple[np.ndarray, ...]:
        return self._neighbours()

    def bound(self, *, with_neighbours: bool = True) -> float:
        others = self.neighbours if with_neighbours else ()
        return tolerance.bound(self.value, others, rope_positions=self.rope_positions)

    def compare(
        self, actual: np.ndarray, *, against: np.ndarray | None = None, slack: float = 1.0
    ) -> tolerance.Comparison:
        """`actual` against this oracle value (or against `against`, another output of the model
        for the same input) under this value's bound times `slack`."""
        error = tolerance.compare(actual, self.value if against is None else against)
        floor = slack * self.bound(with_neighbours=False)
        # The neighbours only widen the bound: skip computing them while the error is far below the
        # floor (the ratio reported is then an upper bound, at most 1/4).
        if error.max_error <= floor / 4:
            return tolerance.Comparison(error.max_error, floor, error.index)
        return tolerance.Comparison(error.max_error, slack * self.bound(), error.index)

    def __getitem__(self, index: Any) -> Expected:
        """The same slice of the value and of every neighbour."""
        return Expected(self.value[index], lambda: tuple(n[index] for n in self.neighbours), self.rope_positions)


def exact(value: np.ndarray, rope_positions: int = 0) -> Expected:
    """What a law gives exactly (a rotation's norm, an unchanged prefix): only the floor applies."""
    return Expected(np.asarray(value, np.float64), tuple, rope_positions)


class Oracle:
    """The float64 reference for one config and weight set, and its two neighbours."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.config = config
        self.model = build_float64(config, weights)
        self._weights = weights

    @cached_property
    def _neighbours(self) -> tuple[NumpyModel, ...]:
        """Built on first use: most comparisons never need them."""
        return (
            NumpyModel(self.config, tolerance.perturbed(self._weights, seed=0), np.float64),
            NumpyModel(self.config, tolerance.perturbed(self._weights, seed=1), np.float64),
            NumpyModel(self.config, self._weights, np.float32),
        )

    def _rope_positions(self, n_positions: int) -> int:
        return n_positions - 1 if self.config.uses_rope else 0

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> Expected:
        """Expected logits of tokens [T] or [B, T] (optionally left-padded with a mask)."""
        value = self.model.logits(tokens, attention_mask=attention_mask)

        def neighbours() -> tuple[np.ndarray, ...]:
            return tuple(m.logits(tokens, attention_mask=attention_mask) for m in self._neighbours)

        return Expected(value, neighbours, self._rope_positions(np.shape(tokens)[-1]))

    def localize(self, trace: dict[str, np.ndarray], tokens: np.ndarray) -> Divergence:
        """Where a model's trace of `tokens` [T] first departs from the oracle's."""
        expected, rope_positions = self.model.trace(tokens), self._rope_positions(len(tokens))
        floor_only = localize(trace, expected, rope_positions=rope_positions)
        if max((s.ratio for s in floor_only.stages), default=0.0) <= 0.25:  # as in Expected.compare
            return floor_only
        neighbours = [m.trace(tokens) for m in self._neighbours]
        return localize(trace, expected, neighbours, rope_positions=rope_positions)

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        return self.model.trace(tokens)


_last: dict[tuple[ModelConfig, int, float], Oracle] = {}


def oracle(case: Case) -> Oracle:
    """The oracle of `case`'s config and weights, remembered for the last case."""
    key = (case.config, case.seed, case.scale)
    if key not in _last:
        _last.clear()
        _last[key] = Oracle(case.config, case.weights())
    return _last[key]
