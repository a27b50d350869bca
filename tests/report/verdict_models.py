"""Factories for the verdict tests, usable as `--model tests.report.verdict_models:<name>`: a model
that refuses every config, one that runs only the probe configs, a correct one whose trace leaves
out the attention scores and probabilities, and one that breaks the logits shape rule with a
long message."""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.interface import Unsupported
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.reference import NumpyModel


def refuses_everything(config: ModelConfig, weights: Weights) -> Any:
    raise Unsupported(f"this implementation runs d_model 768 only, not {config.d_model}")


def runs_only_the_probes(config: ModelConfig, weights: Weights) -> Any:
    if config not in PROBE_CONFIGS.values():
        raise Unsupported("only the probe configs")
    return NumpyModel(config, weights)


class _TraceWithoutAttention:
    """The reference, with a trace that leaves out every `scores` and `probs` stage (a subset is allowed)."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.ref.logits(tokens)

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.ref.trace(tokens).items() if not k.endswith((".scores", ".probs"))}


def trace_without_attention(config: ModelConfig, weights: Weights) -> Any:
    return _TraceWithoutAttention(config, weights)


class _WrongShape:
    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.ref.logits(tokens)[..., :-1]  # one vocabulary entry short


def wrong_shape(config: ModelConfig, weights: Weights) -> Any:
    return _WrongShape(config, weights)
