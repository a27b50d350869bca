"""Calling a model under test through its contract, so that every breach fails by name.

Properties never call a user's model directly: they call a `CheckedModel`, which validates each
answer (shape, dtype, finiteness, stage names) and turns an exception inside the model into a
`ContractViolation` naming the rule broken and the call that broke it. The two rules that take
more than one call, `deterministic` and `cache-reusable`, are checked by properties with drawn
inputs (test_agreement.py, test_kv_cache.py), whose messages quote RULES.
`probe` builds a model on a tiny config of each kind once, for capability tables and skip reasons.
The checks set `__tracebackhide__`, so pytest shows the property's call and the message, not them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.analysis.precision import FLOAT32, Precision, UnknownPrecision, resolve
from verifier.model.config import Family, ModelConfig
from verifier.model.stages import stage_shapes
from verifier.model.weights import Weights, init_weights
from verifier.plugin.interface import (
    CAPABILITIES,
    METHOD,
    Unsupported,
    accepts_keyword,
    capabilities,
    declared_capabilities,
    declared_precision,
)
from verifier.plugin.registry import ModelSpec

RULES = {
    "factory": "build(config, weights) returns a model, or raises Unsupported for a config it cannot run",
    "has-logits": "the model has a logits(tokens) method, or greedy(prompt, n_new) if it is a black box",
    "capabilities": "declared capabilities are known names, each backed by its method",
    "no-exception": "the model does not raise on valid input",
    "shape": "logits(tokens [T]) is [T, V] and logits(tokens [B, T]) is [B, T, V]",
    "dtype": "logits are a floating-point array",
    "finite": "logits hold no NaN or Inf for finite weights",
    "decode-returns-pair": "decode(tokens, cache) returns (logits, cache)",
    "trace-returns-dict": "trace(tokens) returns a dict of stage name -> array",
    "trace-stages": "trace(tokens [T]) names its stages as verifier.model.stages does",
    "greedy-tokens": "greedy(prompt, n_new) returns n_new token ids in [0, V)",
    "deterministic": "the same input gives the same output, also after other calls",
    "cache-reusable": "decode(tokens, cache) leaves `cache` usable: decoding from it again gives the same result",
    "precision": "a declared precision names a class of verifier.analysis.precision",
}


class ContractViolation(AssertionError):
    """A model that broke a rule of the contract; the message names the rule and the call."""

    def __init__(self, model: str, rule: str, call: str, detail: str) -> None:
        super().__init__(f"model {model!r} broke the contract rule {rule!r} ({RULES[rule]}) in {call}: {detail}")
        self.rule = rule
        self.call = call


class MissingCapability(RuntimeError):
    """A property called a method the model has no capability for (check `lacks` first)."""


def describe_array(value: Any) -> str:
    """`int64 [2, 5]`: dtype and shape, the way calls are shown in messages."""
    array = np.asarray(value)
    return f"{array.dtype} [{', '.join(map(str, array.shape))}]"


class CheckedModel:
    """A model under test whose every answer is checked against the contract."""

    def __init__(self, model: Any, name: str, config: ModelConfig, factory: Any = None) -> None:
        self.model = model
        self.name = name
        self.config = config
        self.capabilities = capabilities(model)
        self._check_declared()
        self.precision, self.precision_declared = self._precision(declared_precision(model, factory))

    def _precision(self, declared: Any) -> tuple[Precision, bool]:
        """The precision class the model (or its factory) declares, else float32."""
        __tracebackhide__ = True
        if declared is None:
            return FLOAT32, False
        try:
            return resolve(declared), True
        except UnknownPrecision as e:
            call = f"{type(self.model).__name__}.precision = {declared!r}"
            raise ContractViolation(self.name, "precision", call, str(e)) from None

    def _check_declared(self) -> None:
        __tracebackhide__ = True
        declared = declared_capabilities(self.model)
        if declared is None:
            return
        call = f"{type(self.model).__name__}.capabilities = {sorted(declared)}"
        unknown = sorted(declared - set(CAPABILITIES))
        if unknown:
            raise ContractViolation(self.name, "capabilities", call, f"unknown {unknown}; known: {list(CAPABILITIES)}")
        for capability in sorted(declared):
            method = getattr(self.model, METHOD[capability], None)
            if not callable(method):
                raise ContractViolation(
                    self.name, "capabilities", call, f"declares {capability!r} but has no {METHOD[capability]}() method"
                )
            if capability == "attention_mask" and not accepts_keyword(method, "attention_mask"):
                raise ContractViolation(
                    self.name, "capabilities", call, "declares 'attention_mask' but logits() takes no attention_mask"
                )

    def lacks(self, capability: str) -> str | None:
        """None if the model has `capability`, else the reason a property needing it skips."""
        if capability in self.capabilities:
            return None
        return f"model {self.name!r} has no {capability!r} capability ({CAPABILITIES[capability]})"

    def _require(self, capability: str) -> None:
        __tracebackhide__ = True
        reason = self.lacks(capability)
        if reason is not None:
            raise MissingCapability(f"{reason}; a property must check CheckedModel.lacks({capability!r}) first")

    def _call(self, method: str, call: str, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return getattr(self.model, method)(*args, **kwargs)
        except Unsupported:  # an input the model declares it cannot take (e.g. a prompt it cannot encode)
            raise
        except Exception as e:
            raise ContractViolation(self.name, "no-exception", call, f"raised {type(e).__name__}: {e}") from e

    def _as_array(self, value: Any, rule: str, call: str, what: str) -> np.ndarray:
        __tracebackhide__ = True
        if isinstance(value, np.ndarray):
            return value
        if not hasattr(value, "__array__"):
            raise ContractViolation(self.name, rule, call, f"{what} is a {type(value).__name__}, not an array")
        try:
            return np.asarray(value)
        except Exception as e:  # e.g. a torch tensor that requires grad or lives on a GPU
            raise ContractViolation(
                self.name, rule, call, f"{what} is a {type(value).__name__} that NumPy cannot read: {e}"
            ) from e

    def _check_logits(self, logits: Any, tokens: np.ndarray, call: str) -> np.ndarray:
        __tracebackhide__ = True
        array = self._as_array(logits, "dtype", call, "the logits")
        expected = (*tokens.shape, self.config.vocab_size)
        if array.shape != expected:
            raise ContractViolation(
                self.name, "shape", call, f"returned shape {list(array.shape)}, expected {list(expected)}"
            )
        if not np.issubdtype(array.dtype, np.floating):
            raise ContractViolation(self.name, "dtype", call, f"returned dtype {array.dtype}, expected a float dtype")
        if not np.isfinite(array).all():
            bad = np.argwhere(~np.isfinite(array))[0].tolist()
            raise ContractViolation(self.name, "finite", call, f"first non-finite entry at {bad}: {array[tuple(bad)]}")
        return array

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Checked `logits`: [T] -> [T, V], [B, T] -> [B, T, V]."""
        __tracebackhide__ = True
        tokens = np.asarray(tokens, dtype=np.int64)
        if attention_mask is None:
            self._require("logits")
            call = f"logits(tokens {describe_array(tokens)})"
            out = self._call("logits", call, tokens)
        else:
            self._require("attention_mask")
            call = f"logits(tokens {describe_array(tokens)}, attention_mask {describe_array(attention_mask)})"
            out = self._call("logits", call, tokens, attention_mask=np.asarray(attention_mask, dtype=np.int64))
        return self._check_logits(out, tokens, call)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Checked `decode`: logits of a chunk [T] or [B, T] after `cache`, and the new cache."""
        __tracebackhide__ = True
        self._require("decode")
        tokens = np.asarray(tokens, dtype=np.int64)
        call = f"decode(tokens {describe_array(tokens)}, cache={'None' if cache is None else '<cache>'})"
        out = self._call("decode", call, tokens, cache)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ContractViolation(self.name, "decode-returns-pair", call, f"returned {type(out).__name__}")
        return self._check_logits(out[0], tokens, call), out[1]

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Checked `trace` of one sequence [T]: {stage name: array}, names as in `verifier.model.stages`."""
        __tracebackhide__ = True
        self._require("trace")
        tokens = np.asarray(tokens, dtype=np.int64)
        call = f"trace(tokens {describe_array(tokens)})"
        out = self._call("trace", call, tokens)
        if not isinstance(out, dict):
            raise ContractViolation(self.name, "trace-returns-dict", call, f"returned {type(out).__name__}")
        known = stage_shapes(self.config, len(tokens))
        unknown = [stage for stage in out if stage not in known]
        if unknown:
            raise ContractViolation(
                self.name, "trace-stages", call, f"unknown stages {unknown}; stages are named like {list(known)[:4]}"
            )
        as_array = self._as_array
        return {stage: as_array(value, "trace-returns-dict", call, f"stage {stage!r}") for stage, value in out.items()}

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """Checked `greedy`: the n_new argmax tokens after `prompt` [T]."""
        __tracebackhide__ = True
        self._require("greedy")
        prompt = np.asarray(prompt, dtype=np.int64)
        call = f"greedy(prompt {describe_array(prompt)}, n_new={n_new})"
        out = self._as_array(self._call("greedy", call, prompt, n_new), "greedy-tokens", call, "the result")
        V = self.config.vocab_size
        if out.shape != (n_new,) or not np.issubdtype(out.dtype, np.integer) or ((out < 0) | (out >= V)).any():
            raise ContractViolation(self.name, "greedy-tokens", call, f"returned {describe_array(out)}: {out.tolist()}")
        return out


def build_checked(spec: ModelSpec, config: ModelConfig, weights: Weights) -> CheckedModel:
    """Build `spec`'s model for (config, weights), checked; `Unsupported` passes through.

    The factory gets its own float32 copy of the weights, so it cannot change the caller's.
    """
    __tracebackhide__ = True
    call = f"{spec.name} factory(config={config.family} d_model={config.d_model} n_layers={config.n_layers}, weights)"
    try:
        model = spec.factory(config, {name: np.array(w, dtype=np.float32) for name, w in weights.items()})
    except Unsupported:
        raise
    except Exception as e:
        raise ContractViolation(spec.name, "factory", call, f"raised {type(e).__name__}: {e}") from e
    if model is None or not any(callable(getattr(model, m, None)) for m in ("logits", "greedy")):
        raise ContractViolation(spec.name, "has-logits", call, f"returned {type(model).__name__} without logits()")
    return CheckedModel(model, spec.name, config, spec.factory)


def _probe_config(family: Family, n_heads: int, n_kv_heads: int) -> ModelConfig:
    return ModelConfig(
        family=family,
        vocab_size=32,
        n_ctx=16,
        d_model=4 * n_heads,
        n_layers=1,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=24,
        norm_eps=1e-5,
        tie_embeddings=family == "gpt2",
    )


# One tiny config of each kind a model may or may not support.
PROBE_CONFIGS: dict[str, ModelConfig] = {
    "gpt2": _probe_config("gpt2", 2, 2),
    "llama": _probe_config("llama", 2, 2),
    "llama-gqa": _probe_config("llama", 4, 2),
}


@dataclass(frozen=True)
class Probe:
    """What building a model on one probe config gave: its capabilities, or why there are none."""

    kind: str
    capabilities: frozenset[str]
    unsupported: str | None = None
    error: str | None = None
    precision: str = ""  # the built model's precision class, and whether it declared it
    declared: bool = False

    def summary(self) -> str:
        """`logits, decode, ...`, or `unsupported (reason)`, or `broken (message)`."""
        if self.error is not None:
            return f"broken ({self.error})"
        if self.unsupported is not None:
            return f"unsupported ({self.unsupported})"
        return ", ".join(c for c in CAPABILITIES if c in self.capabilities)


def probe(spec: ModelSpec) -> list[Probe]:
    """Build `spec`'s model once on each of PROBE_CONFIGS (seeded weights) and record what it offers."""
    probes = []
    for kind, config in PROBE_CONFIGS.items():
        try:
            model = build_checked(spec, config, init_weights(config, seed=0))
        except Unsupported as e:
            probes.append(Probe(kind, frozenset(), unsupported=str(e) or type(e).__name__))
        except ContractViolation as e:
            probes.append(Probe(kind, frozenset(), error=str(e)))
        else:
            probes.append(Probe(kind, model.capabilities, precision=model.precision.label,
                                declared=model.precision_declared))  # fmt: skip
    return probes
