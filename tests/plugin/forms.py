"""Models in the two declared forms, and the mistakes users make with them, for the contract tests:
usable as `--model tests.plugin.forms:<name>` like any user's model. Each wraps the NumPy reference.

- `last_only` gives the last position's logits and declares "last_logits"; `last_only_undeclared`
  does the same without declaring it.
- `one_at_a_time` takes one sequence at a time and declares "unbatched"; `one_at_a_time_undeclared`
  raises on a batch, `drops_the_batch` answers a batch with its first row's logits.
- `says_last_gives_all` declares "last_logits" but gives every position; `declares_both` both forms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier import ModelConfig, NumpyModel, Weights


class _Wrapped:
    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.ref = NumpyModel(config, weights)
        self.calls: list[tuple[int, ...]] = []  # the shape of each logits() call

    def logits(self, tokens: np.ndarray) -> Any:
        self.calls.append(np.shape(tokens))
        return self.ref.logits(tokens)


class _LastOnly(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        return super().logits(tokens)[..., -1, :]


class _LastOnlyDeclared(_LastOnly):
    capabilities = frozenset({"last_logits"})


def last_only(config: ModelConfig, weights: Weights) -> Any:
    return _LastOnlyDeclared(config, weights)


def last_only_undeclared(config: ModelConfig, weights: Weights) -> Any:
    return _LastOnly(config, weights)


class _OneAtATime(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        if np.ndim(tokens) != 1:
            raise ValueError(f"expected one sequence, got shape {np.shape(tokens)}")
        return super().logits(tokens)


class _OneAtATimeDeclared(_OneAtATime):
    capabilities = frozenset({"logits", "unbatched"})


def one_at_a_time(config: ModelConfig, weights: Weights) -> Any:
    return _OneAtATimeDeclared(config, weights)


def one_at_a_time_undeclared(config: ModelConfig, weights: Weights) -> Any:
    return _OneAtATime(config, weights)


class _DropsTheBatch(_Wrapped):
    def logits(self, tokens: np.ndarray) -> Any:
        return super().logits(np.atleast_2d(tokens)[0])


def drops_the_batch(config: ModelConfig, weights: Weights) -> Any:
    return _DropsTheBatch(config, weights)


class _SaysLastGivesAll(_Wrapped):
    capabilities = frozenset({"last_logits"})


def says_last_gives_all(config: ModelConfig, weights: Weights) -> Any:
    return _SaysLastGivesAll(config, weights)


class _DeclaresBoth(_Wrapped):
    capabilities = frozenset({"logits", "last_logits"})


def declares_both(config: ModelConfig, weights: Weights) -> Any:
    return _DeclaresBoth(config, weights)
