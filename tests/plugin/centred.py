"""Implementations whose logits are defined up to a constant per position (each position's logits
minus their mean over the vocabulary: an unembedding centred as TransformerLens keeps it by
default), for tests/plugin/test_up_to_a_constant.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.meta.mutants import catalog
from tests.meta.mutants.base import Transformer
from verifier import ModelConfig, Weights


class _Centred:
    def __init__(self, model: Transformer) -> None:
        self.model = model

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        logits = np.asarray(self.model.logits(tokens))
        return logits - logits.mean(axis=-1, keepdims=True)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        logits, cache = self.model.decode(tokens, cache)
        logits = np.asarray(logits)
        return logits - logits.mean(axis=-1, keepdims=True), cache


def centred(config: ModelConfig, weights: Weights) -> Any:
    """The correct model, centred, declaring it."""
    return _Centred(catalog.correct(config, weights))


centred.logits_up_to_a_constant = True  # type: ignore[attr-defined]


def centred_undeclared(config: ModelConfig, weights: Weights) -> Any:
    """The correct model, centred, declaring nothing: its logits are not the oracle's."""
    return _Centred(catalog.correct(config, weights))


def centred_with_a_bug(config: ModelConfig, weights: Weights) -> Any:
    """The catalog's ScaleByDHead, centred, declaring it: the declaration hides no bug."""
    return _Centred(catalog.mutants.ScaleByDHead(config, weights))


centred_with_a_bug.logits_up_to_a_constant = True  # type: ignore[attr-defined]
