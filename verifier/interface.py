"""The contract between the suite and a model under test.

A **factory** `build(config, weights) -> model` takes a `ModelConfig` and the canonical weights
(float32 NumPy arrays, `transformers` names and layouts) and returns a **model** with

    logits(tokens) -> logits        int64 [T] -> float [T, V];  [B, T] -> [B, T, V]

and, optionally, capabilities that enable more properties (the others skip, saying why):

    decode(tokens, cache=None) -> (logits, cache)   "decode": a chunk of new tokens after an
                                                    opaque cache (None = empty); never mutates it
    trace(tokens) -> {stage: array}                 "trace": stages named as in verifier.stages
    logits(tokens, attention_mask=...)              "attention_mask": [B, T] of 0/1, left padding
    greedy(prompt, n_new) -> tokens                 "greedy": n_new argmax tokens after prompt [T],
                                                    for black boxes that cannot return logits

Capabilities are detected from the methods a model has, or declared by a `capabilities`
attribute (a set of the names above) when detection would be wrong. A factory that cannot
build a config raises `Unsupported` with the reason; the suite then draws other configs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from verifier.config import ModelConfig
from verifier.weights import Weights

CAPABILITIES = ("logits", "decode", "trace", "attention_mask", "greedy")


@runtime_checkable
class Model(Protocol):
    """What every model under test has: logits for every position."""

    def logits(self, tokens: np.ndarray) -> np.ndarray: ...


Factory = Callable[[ModelConfig, Weights], Any]


class Unsupported(Exception):
    """Raised by a factory for a config its model cannot run, with the reason as message."""


def capabilities(model: Any) -> frozenset[str]:
    """The capabilities of a built model: declared by `model.capabilities`, else detected."""
    declared = getattr(model, "capabilities", None)
    if declared is not None:
        unknown = set(declared) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"unknown capabilities {sorted(unknown)} declared; known: {CAPABILITIES}")
        return frozenset(declared)
    found = {name for name in ("logits", "decode", "trace", "greedy") if callable(getattr(model, name, None))}
    logits = getattr(model, "logits", None)
    if callable(logits) and "attention_mask" in _parameters(logits):
        found.add("attention_mask")
    return frozenset(found)


def _parameters(fn: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins and C extensions may have no signature
        return set()
