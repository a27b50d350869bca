"""Calling a model under test through its contract, so that every breach fails by name.

Properties never call a user's model directly: they call a `CheckedModel`, which validates each
answer (shape, dtype, finiteness) and turns an exception inside the model into a
`ContractViolation` naming the rule broken and the call that broke it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.config import ModelConfig
from verifier.interface import Unsupported, capabilities
from verifier.registry import ModelSpec
from verifier.weights import Weights

RULES = {
    "factory": "build(config, weights) returns a model, or raises Unsupported for a config it cannot run",
    "has-logits": "the model has a logits(tokens) method",
    "no-exception": "the model does not raise on valid input",
    "shape": "logits(tokens [T]) is [T, V] and logits(tokens [B, T]) is [B, T, V]",
    "dtype": "logits are a floating-point array",
    "finite": "logits hold no NaN or Inf for finite weights",
    "decode-returns-pair": "decode(tokens, cache) returns (logits, cache)",
    "trace-returns-dict": "trace(tokens) returns a dict of stage name -> array",
    "greedy-tokens": "greedy(prompt, n_new) returns n_new token ids in [0, V)",
    "deterministic": "the same input gives the same output, also after other calls",
    "cache-reusable": "decode(tokens, cache) leaves `cache` usable: decoding from it again gives the same result",
}


class ContractViolation(AssertionError):
    """A model that broke a rule of the contract; the message names the rule and the call."""

    def __init__(self, model: str, rule: str, call: str, detail: str) -> None:
        super().__init__(f"model {model!r} broke the contract rule {rule!r} ({RULES[rule]}) in {call}: {detail}")
        self.rule = rule
        self.call = call


def describe_array(value: Any) -> str:
    """`int64 [2, 5]`: dtype and shape, the way calls are shown in messages."""
    array = np.asarray(value)
    return f"{array.dtype} [{', '.join(map(str, array.shape))}]"


class CheckedModel:
    """A model under test whose every answer is checked against the contract."""

    def __init__(self, model: Any, name: str, config: ModelConfig) -> None:
        self.model = model
        self.name = name
        self.config = config
        self.capabilities = capabilities(model)

    def _call(self, method: str, call: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.model, method)(*args, **kwargs)
        except Exception as e:
            raise ContractViolation(self.name, "no-exception", call, f"raised {type(e).__name__}: {e}") from e

    def _check_logits(self, logits: Any, tokens: np.ndarray, call: str) -> np.ndarray:
        if not isinstance(logits, np.ndarray) and hasattr(logits, "__array__"):
            logits = np.asarray(logits)
        if not isinstance(logits, np.ndarray):
            raise ContractViolation(self.name, "dtype", call, f"returned {type(logits).__name__}, not an array")
        expected = (*tokens.shape, self.config.vocab_size)
        if logits.shape != expected:
            raise ContractViolation(
                self.name, "shape", call, f"returned shape {list(logits.shape)}, expected {list(expected)}"
            )
        if not np.issubdtype(logits.dtype, np.floating):
            raise ContractViolation(self.name, "dtype", call, f"returned dtype {logits.dtype}")
        if not np.isfinite(logits).all():
            bad = np.argwhere(~np.isfinite(logits))[0].tolist()
            raise ContractViolation(self.name, "finite", call, f"first non-finite entry at {bad}: {logits[tuple(bad)]}")
        return logits

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        call = f"logits(tokens {describe_array(tokens)})"
        if attention_mask is None:
            out = self._call("logits", call, tokens)
        else:
            call = f"logits(tokens {describe_array(tokens)}, attention_mask {describe_array(attention_mask)})"
            out = self._call("logits", call, tokens, attention_mask=np.asarray(attention_mask, dtype=np.int64))
        return self._check_logits(out, tokens, call)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        tokens = np.asarray(tokens, dtype=np.int64)
        call = f"decode(tokens {describe_array(tokens)}, cache={'None' if cache is None else '<cache>'})"
        out = self._call("decode", call, tokens, cache)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ContractViolation(self.name, "decode-returns-pair", call, f"returned {type(out).__name__}")
        return self._check_logits(out[0], tokens, call), out[1]

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        tokens = np.asarray(tokens, dtype=np.int64)
        call = f"trace(tokens {describe_array(tokens)})"
        out = self._call("trace", call, tokens)
        if not isinstance(out, dict):
            raise ContractViolation(self.name, "trace-returns-dict", call, f"returned {type(out).__name__}")
        return {str(stage): np.asarray(value) for stage, value in out.items()}

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        prompt = np.asarray(prompt, dtype=np.int64)
        call = f"greedy(prompt {describe_array(prompt)}, n_new={n_new})"
        out = np.asarray(self._call("greedy", call, prompt, n_new))
        V = self.config.vocab_size
        if out.shape != (n_new,) or not np.issubdtype(out.dtype, np.integer) or ((out < 0) | (out >= V)).any():
            raise ContractViolation(self.name, "greedy-tokens", call, f"returned {describe_array(out)}: {out.tolist()}")
        return out


def build_checked(spec: ModelSpec, config: ModelConfig, weights: Weights) -> CheckedModel:
    """Build `spec`'s model for (config, weights), checked; `Unsupported` passes through."""
    call = f"{spec.name} factory(config={config.family} d_model={config.d_model} n_layers={config.n_layers}, weights)"
    try:
        model = spec.factory(config, {name: np.array(w, dtype=np.float32) for name, w in weights.items()})
    except Unsupported:
        raise
    except Exception as e:
        raise ContractViolation(spec.name, "factory", call, f"raised {type(e).__name__}: {e}") from e
    if model is None or not any(callable(getattr(model, m, None)) for m in ("logits", "greedy")):
        raise ContractViolation(spec.name, "has-logits", call, f"returned {type(model).__name__} without logits()")
    return CheckedModel(model, spec.name, config)
