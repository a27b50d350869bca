"""The contract between the suite and a model under test.

A **factory** `build(config, weights) -> model` takes a `ModelConfig` and the canonical weights
(float32 NumPy arrays, `transformers` names and layouts) and returns a **model** with

    logits(tokens) -> logits        int64 [T] -> float [T, V];  [B, T] -> [B, T, V]

and, optionally, capabilities that enable more properties (the others skip, saying why):

    decode(tokens, cache=None) -> (logits, cache)   "decode": a chunk of new tokens after an
                                                    opaque cache (None = empty); never mutates it
    trace(tokens) -> {stage: array}                 "trace": stages named as in verifier.model.stages
    logits(tokens, attention_mask=...)              "attention_mask": [B, T] of 0/1, left padding
    greedy(prompt, n_new) -> tokens                 "greedy": n_new argmax tokens after prompt [T],
                                                    for black boxes that cannot return logits

Capabilities are detected from the methods a model has, or declared by a `capabilities`
attribute (a set of the names above) when detection would be wrong.

A model that does not compute in float32 declares its **precision class** with a `precision`
attribute on the model (or on the factory): a class name of `verifier.analysis.precision`
("float32", "tf32", "float16", "bfloat16", "q8_0") or a `Precision` object (e.g.
`precision.q8_0(group_size=64, float16_scales=False)`). It is judged by that class's bounds, and a
quantized class against the oracle on its dequantized weights. A model that declares nothing is
float32. A factory that cannot
build a config raises `Unsupported` with the reason; the suite then draws other configs. A model
method may raise `Unsupported` too, for an input it declares it cannot take (a prompt its
tokenizer cannot encode); the property then draws another input.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights

# Each capability, and the call that provides it (shown in skip reasons and errors).
CAPABILITIES: dict[str, str] = {
    "logits": "logits(tokens) -> logits [T, V] or [B, T, V]",
    "decode": "decode(tokens, cache=None) -> (logits, cache), a KV-cached chunk",
    "trace": "trace(tokens [T]) -> {stage name: array}",
    "attention_mask": "logits(tokens, attention_mask=[B, T] of 0/1) for left-padded batches",
    "greedy": "greedy(prompt [T], n_new) -> n_new argmax token ids",
}

# The method each capability needs; `attention_mask` is a parameter of `logits`.
METHOD = {"logits": "logits", "decode": "decode", "trace": "trace", "attention_mask": "logits", "greedy": "greedy"}


@runtime_checkable
class Model(Protocol):
    """What every model under test has: logits for every position."""

    def logits(self, tokens: np.ndarray) -> np.ndarray: ...


Factory = Callable[[ModelConfig, Weights], Any]


class Unsupported(Exception):
    """Raised by a factory for a config its model cannot run, with the reason as message."""


def declared_capabilities(model: Any) -> frozenset[str] | None:
    """The capabilities a model declares by its `capabilities` attribute, or None if it declares none."""
    declared = getattr(model, "capabilities", None)
    return None if declared is None else frozenset(declared)


def declared_precision(model: Any, factory: Any = None) -> Any | None:
    """The precision class a model declares by its `precision` attribute, else its factory's, else None."""
    for holder in (model, factory):
        declared = getattr(holder, "precision", None)
        if declared is not None:
            return declared
    return None


def detected_capabilities(model: Any) -> frozenset[str]:
    """The capabilities a model's methods provide."""
    found = {name for name in ("logits", "decode", "trace", "greedy") if callable(getattr(model, name, None))}
    if "logits" in found and "attention_mask" in _parameters(model.logits):
        found.add("attention_mask")
    return frozenset(found)


def capabilities(model: Any) -> frozenset[str]:
    """The capabilities of a built model: declared by `model.capabilities`, else detected."""
    declared = declared_capabilities(model)
    return declared if declared is not None else detected_capabilities(model)


def accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether `fn` can be called with keyword `name`: an explicit parameter, or **kwargs."""
    parameters = _parameters(fn)
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins and C extensions may have no signature
        return {}
