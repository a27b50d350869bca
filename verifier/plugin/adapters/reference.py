"""The NumPy reference as a model under test: float32, float64 as the numerical oracle, and run at a
narrower precision class (weights and activations rounded as the format rounds them). Given a mapped
checkpoint (`LazyWeights`, `--checkpoint` on a model too large to hold), each streams it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from verifier.analysis.precision import Precision
from verifier.model.config import ModelConfig
from verifier.model.weights import LazyWeights, WeightMap
from verifier.reference import NumpyModel


def build(config: ModelConfig, weights: WeightMap) -> NumpyModel:
    """The reference in float32, the precision of the models it is compared with."""
    return NumpyModel(config, weights, np.float32, stream=isinstance(weights, LazyWeights))


def build_float64(config: ModelConfig, weights: WeightMap) -> NumpyModel:
    """The reference in float64: the oracle every model's logits are compared against."""
    return NumpyModel(config, weights, np.float64, stream=isinstance(weights, LazyWeights))


class RoundedReference(NumpyModel):
    """The reference at a precision class (float32 arithmetic, rounded by the class's format),
    declaring the class."""

    def __init__(self, config: ModelConfig, weights: WeightMap, precision: Precision) -> None:
        super().__init__(
            config, weights, np.float32, rounding=precision.rounding, stream=isinstance(weights, LazyWeights)
        )
        self.precision = precision


def rounded(precision: Precision) -> Callable[[ModelConfig, WeightMap], RoundedReference]:
    """The factory of the reference run at `precision`."""

    def build(config: ModelConfig, weights: WeightMap) -> RoundedReference:
        return RoundedReference(config, weights, precision)

    build.__name__ = build.__qualname__ = f"build_{precision.name}"
    return build
