"""The NumPy reference as a model under test: float32, and float64 as the numerical oracle."""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.reference import NumpyModel


def build(config: ModelConfig, weights: Weights) -> NumpyModel:
    """The reference in float32, the precision of the models it is compared with."""
    return NumpyModel(config, weights, np.float32)


def build_float64(config: ModelConfig, weights: Weights) -> NumpyModel:
    """The reference in float64: the oracle every model's logits are compared against."""
    return NumpyModel(config, weights, np.float64)
