"""Calling a model under test through its contract, so that every breach fails by name.

Properties never call a user's model directly: they call a `CheckedModel`, which validates each
answer (shape, dtype, finiteness, stage names) and turns an exception inside the model into a
`ContractViolation` naming the rule broken and the call that broke it. The model is untrusted: it is
handed copies of its inputs (a write to one breaks `inputs-unchanged`), what it returns is copied
before it is checked (a buffer it reuses cannot change a result already taken), and each call, its
factory's included, runs under `verifier.plugin.isolation.guarded` (its own process-wide state, no
exit, a deadline). The two rules that take
more than one call, `deterministic` and `cache-reusable`, are checked by properties with drawn
inputs (test_agreement.py, test_kv_cache.py), whose messages quote RULES.
A model that declares "last_logits" is run on every prefix, and one that declares "unbatched" row by
row, so properties get every position of a batch from any model (`logits`), or ask for the last one.
What a model runs is found by building it on tiny configs (`verifier.plugin.probes`).
The checks set `__tracebackhide__`, so pytest shows the property's call and the message, not them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from verifier.analysis.precision import FLOAT32, Precision, UnknownPrecision, resolve
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.stages import stage_shapes
from verifier.model.weights import LazyWeights, WeightMap
from verifier.plugin import isolation
from verifier.plugin.interface import (
    CAPABILITIES,
    METHOD,
    Unsupported,
    accepts_keyword,
    capabilities,
    declared_capabilities,
    declared_logits_up_to_a_constant,
    declared_precision,
    declared_rope_layout,
    lacking,
)
from verifier.plugin.registry import ModelSpec

RULES = {
    "factory": "build(config, weights) returns a model, or raises Unsupported for a config it cannot run",
    "has-logits": "the model has a logits(tokens) method, or greedy(prompt, n_new) if it is a black box",
    "capabilities": "declared capabilities are known names, each backed by its method",
    "no-exception": "the model does not raise on valid input",
    "shape": "logits(tokens [T]) is [T, V] and logits(tokens [B, T]) is [B, T, V] ([V] and [B, V] for 'last_logits')",
    "dtype": "logits are a floating-point array",
    "finite": "logits hold no NaN or Inf for finite weights, at every position that is not padding",
    "decode-returns-pair": "decode(tokens, cache) returns (logits, cache)",
    "trace-returns-dict": "trace(tokens) returns a dict of stage name -> array",
    "trace-stages": "trace(tokens [T]) names its stages as verifier.model.stages does",
    "greedy-tokens": "greedy(prompt, n_new) returns n_new token ids in [0, V)",
    "inputs-unchanged": "the model does not write to the arrays it is given (tokens, attention_mask, prompt)",
    "keeps-the-process": "the model does not end the process (sys.exit, exit(), os._exit) in a call",
    "returns-in-time": "each call (the factory, or a method) returns within its deadline (--call-timeout)",
    "deterministic": "the same input gives the same output, also after other calls",
    "cache-reusable": "decode(tokens, cache) leaves `cache` usable: decoding from it again gives the same result",
    "precision": "a declared precision names a class of verifier.analysis.precision",
    "rope-layout": "trace() holds each head's q and k (before and after RoPE) in the rotate-half order of "
    "transformers, or in the one the model declares by rope_layout ('rotate_half' or 'interleaved')",
    "logits-up-to-a-constant": "a declared logits_up_to_a_constant is True (logits compared as log-probabilities) "
    "or False",
}


class ContractViolation(AssertionError):
    """A model that broke a rule of the contract; the message names the rule and the call."""

    def __init__(self, model: str, rule: str, call: str, detail: str) -> None:
        super().__init__(f"model {model!r} broke the contract rule {rule!r} ({RULES[rule]}) in {call}: {detail}")
        self.rule = rule
        self.call = call
        self.detail = detail


class MissingCapability(RuntimeError):
    """A property called a method the model has no capability for (check `lacks` first)."""


def describe_array(value: Any) -> str:
    """`int64 [2, 5]`: dtype and shape, the way calls are shown in messages."""
    array = np.asarray(value)
    return f"{array.dtype} [{', '.join(map(str, array.shape))}]"


class CheckedModel:
    """A model under test whose every answer is checked against the contract.

    `logits` gives every position whatever the model's form: a "last_logits" model is run on each
    prefix, an "unbatched" one row by row. `last_logits` gives the last position in one call where
    the model can. `decode` gives the chunk's positions the model gives: all T, or for a
    "last_logits" model the last one ([..., 1, V]).
    """

    def __init__(
        self,
        model: Any,
        name: str,
        config: ModelConfig,
        factory: Any = None,
        context: isolation.Context | None = None,
        deadline_s: float | None = None,
    ) -> None:
        self.model = model
        self.name = name
        self.config = config
        self.context = context or isolation.Context()  # the process-wide state the model runs in
        self.deadline_s = deadline_s or isolation.call_timeout()
        self.capabilities = capabilities(model)
        self._check_declared()
        self.every_position = "last_logits" not in self.capabilities
        self.batched = "unbatched" not in self.capabilities
        self.precision, self.precision_declared = self._precision(declared_precision(model, factory))
        self.rope_layout = self._rope_layout(declared_rope_layout(model, factory))
        self.logits_up_to_a_constant = self._up_to_a_constant(declared_logits_up_to_a_constant(model, factory))

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

    def _rope_layout(self, declared: Any) -> str:
        """The order of q/k in the model's trace it (or its factory) declares, else rotate-half."""
        __tracebackhide__ = True
        if declared is None:
            return stages.ROTATE_HALF
        if declared not in stages.ROPE_LAYOUTS:
            call = f"{type(self.model).__name__}.rope_layout = {declared!r}"
            raise ContractViolation(self.name, "rope-layout", call, f"expected one of {list(stages.ROPE_LAYOUTS)}")
        return str(declared)

    def _up_to_a_constant(self, declared: Any) -> bool:
        """Whether the model (or its factory) declares its logits defined up to a constant per position."""
        __tracebackhide__ = True
        if declared is None:
            return False
        if not isinstance(declared, bool):
            call = f"{type(self.model).__name__}.logits_up_to_a_constant = {declared!r}"
            raise ContractViolation(self.name, "logits-up-to-a-constant", call, "expected True or False")
        return declared

    def _check_declared(self) -> None:
        __tracebackhide__ = True
        declared = declared_capabilities(self.model)
        if declared is None:
            return
        call = f"{type(self.model).__name__}.capabilities = {sorted(declared)}"
        unknown = sorted(declared - set(CAPABILITIES))
        if unknown:
            raise ContractViolation(self.name, "capabilities", call, f"unknown {unknown}; known: {list(CAPABILITIES)}")
        if {"logits", "last_logits"} <= declared:
            raise ContractViolation(
                self.name, "capabilities", call, "declares both 'logits' (every position) and 'last_logits' (the "
                "last position only): logits() gives one or the other",
            )  # fmt: skip
        for capability in sorted(declared):
            method = METHOD[capability]
            if method is not None and not callable(getattr(self.model, method, None)):
                raise ContractViolation(
                    self.name, "capabilities", call, f"declares {capability!r} but has no {method}() method"
                )
            if capability == "attention_mask" and not accepts_keyword(self.model.logits, "attention_mask"):
                raise ContractViolation(
                    self.name, "capabilities", call, "declares 'attention_mask' but logits() takes no attention_mask"
                )

    def lacks(self, capability: str) -> str | None:
        """None if the model meets `capability` (a capability, "logits" in either form, or "batch"),
        else the reason a property needing it skips."""
        return lacking(self.name, self.capabilities, capability)

    def _require(self, capability: str) -> None:
        __tracebackhide__ = True
        reason = self.lacks(capability)
        if reason is not None:
            raise MissingCapability(f"{reason}; a property must check CheckedModel.lacks({capability!r}) first")

    def _declare(self, change: str, add: str, remove: str = "") -> str:
        """A hint: the capabilities to declare for `change`."""
        suggested = sorted((self.capabilities - {remove}) | {add})
        return f"; {change}, declare it on the model: capabilities = {{{', '.join(map(repr, suggested))}}}"

    def _call(self, method: str, call: str, tokens: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        """The model's `method` on copies of `tokens` and of the arrays among `kwargs` (an attention mask),
        guarded; a write to a copy breaks `inputs-unchanged`. `args` (a decode's cache, greedy's n_new) are
        the model's own and passed as they are."""
        __tracebackhide__ = True
        handed = {"prompt" if method == "greedy" else "tokens": tokens, **kwargs}
        copies = {name: np.array(v) if isinstance(v, np.ndarray) else v for name, v in handed.items()}
        hint = ""
        if np.ndim(tokens) == 2 and self.batched:
            hint = self._declare("if the model takes one sequence at a time", "unbatched")
        first, *others = copies.values()
        out = guarded_call(
            self.name, call, self.context, self.deadline_s,
            lambda: getattr(self.model, method)(first, *args, **dict(zip(kwargs, others, strict=True))), hint=hint,
        )  # fmt: skip
        for name, value in handed.items():
            copy = copies[name]
            if isinstance(value, np.ndarray) and not np.array_equal(value, copy):
                changed = np.argwhere(value != copy)[0].tolist() if value.shape == copy.shape else "its shape"
                raise ContractViolation(
                    self.name, "inputs-unchanged", call,
                    f"it wrote to its {name} (first change at {changed}): the suite hands over a copy, but a caller "
                    "of the model would see its own array changed",
                )  # fmt: skip
        return out

    def _as_array(self, value: Any, rule: str, call: str, what: str) -> np.ndarray:
        """A copy of what the model returned, as an array: a buffer the model reuses (or a view of an
        engine's memory) cannot change it later."""
        __tracebackhide__ = True
        if isinstance(value, np.ndarray):
            return value.copy()
        if not hasattr(value, "__array__"):
            raise ContractViolation(
                self.name, rule, call, f"{what} came back as type {type(value).__name__}, not an array"
            )
        try:
            return np.asarray(value).copy()  # a view of a tensor or an engine's buffer, until copied
        except Exception as e:  # e.g. a torch tensor that requires grad or lives on a GPU
            raise ContractViolation(
                self.name, rule, call, f"{what} came back as type {type(value).__name__}, which NumPy cannot read: {e}"
            ) from e

    def _shape_hint(self, shape: tuple[int, ...], tokens: np.ndarray) -> str:
        """What to declare when a model's logits have the shape of another form."""
        V = self.config.vocab_size
        every, last = (*tokens.shape, V), (*tokens.shape[:-1], V)
        if self.every_position and shape in (last, (*tokens.shape[:-1], 1, V)) and tokens.shape[-1] > 1:
            return self._declare("if the model gives only the last position's logits", "last_logits", "logits")
        if not self.every_position and shape == every and tokens.shape[-1] > 1:
            return self._declare("if the model gives every position's logits", "logits", "last_logits")
        if not self.every_position and shape == (*tokens.shape[:-1], 1, V):
            return "; give the last position's logits without a position axis ([V], or [B, V] for a batch)"
        if tokens.ndim == 2 and self.batched and shape in (every[1:], last[1:]):
            return self._declare("if the model takes one sequence at a time", "unbatched")
        return ""

    def _check_logits(
        self, logits: Any, tokens: np.ndarray, call: str, *, last: bool = False, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """The model's logits of `tokens`, checked: every position, or the last one if `last`; with an
        attention `mask`, finite where it is 1 (a padded position's logits mean nothing)."""
        __tracebackhide__ = True
        array = self._as_array(logits, "dtype", call, "the logits")
        expected = (*tokens.shape[: -1 if last else None], self.config.vocab_size)
        if array.shape != expected:
            raise ContractViolation(
                self.name, "shape", call,
                f"returned shape {list(array.shape)}, expected {list(expected)}{self._shape_hint(array.shape, tokens)}",
            )  # fmt: skip
        if not np.issubdtype(array.dtype, np.floating):
            raise ContractViolation(self.name, "dtype", call, f"returned dtype {array.dtype}, expected a float dtype")
        real = np.ones(array.shape[:-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if last and mask is not None:
            real = real[..., -1]
        non_finite = ~np.isfinite(array) & real[..., None]
        if non_finite.any():
            bad = np.argwhere(non_finite)[0].tolist()
            raise ContractViolation(self.name, "finite", call, f"first non-finite entry at {bad}: {array[tuple(bad)]}")
        return array

    def _model_logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None) -> np.ndarray:
        """One checked call of the model's logits: [T, V] / [B, T, V], or [V] / [B, V] if "last_logits"."""
        __tracebackhide__ = True
        if tokens.ndim == 2 and not self.batched:
            self._require("batch")
        if attention_mask is None:
            call = f"logits(tokens {describe_array(tokens)})"
            out = self._call("logits", call, tokens)
        else:
            self._require("attention_mask")
            call = f"logits(tokens {describe_array(tokens)}, attention_mask {describe_array(attention_mask)})"
            out = self._call("logits", call, tokens, attention_mask=np.asarray(attention_mask, dtype=np.int64))
        return self._check_logits(out, tokens, call, last=not self.every_position, mask=attention_mask)

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Checked logits of every position: [T] -> [T, V], [B, T] -> [B, T, V] (rows one at a time for
        an "unbatched" model, every prefix for a "last_logits" one)."""
        __tracebackhide__ = True
        self._require("logits")
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim == 2 and not self.batched and attention_mask is None:
            return np.stack([self.logits(row) for row in tokens])
        if self.every_position:
            return self._model_logits(tokens, attention_mask)
        prefixes = range(1, tokens.shape[-1] + 1)
        masks = [None if attention_mask is None else np.asarray(attention_mask)[..., :t] for t in prefixes]
        rows = [self._model_logits(tokens[..., :t], mask) for t, mask in zip(prefixes, masks, strict=True)]
        return np.stack(rows, axis=-2)

    def last_logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Checked logits of the last position: [T] -> [V], [B, T] -> [B, V]."""
        __tracebackhide__ = True
        self._require("logits")
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim == 2 and not self.batched and attention_mask is None:
            return np.stack([self.last_logits(row) for row in tokens])
        if self.every_position:
            return self._model_logits(tokens, attention_mask)[..., -1, :]
        return self._model_logits(tokens, attention_mask)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Checked `decode` of a chunk [T] or [B, T] after `cache`: (logits [..., T, V], or the last
        position's [..., 1, V] for a "last_logits" model; the new cache)."""
        __tracebackhide__ = True
        self._require("decode")
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim == 2:
            self._require("batch")
        call = f"decode(tokens {describe_array(tokens)}, cache={'None' if cache is None else '<cache>'})"
        out = self._call("decode", call, tokens, cache)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ContractViolation(self.name, "decode-returns-pair", call, f"returned {type(out).__name__}")
        logits = self._check_logits(out[0], tokens, call, last=not self.every_position)
        return (logits if self.every_position else logits[..., None, :]), out[1]

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Checked `trace` of one sequence [T]: {stage name: array}, names as in `verifier.model.stages`,
        q and k in rotate-half order (reordered from the layout the model declares)."""
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
        found = {stage: as_array(value, "trace-returns-dict", call, f"stage {stage!r}") for stage, value in out.items()}
        if self.rope_layout == stages.ROTATE_HALF or not self.config.uses_rope:
            return found
        # Only a stage whose last axis is the head dimension has a layout; any other shape is compared as traced.
        return {
            stage: stages.to_rotate_half(array, self.rope_layout)
            if stages.split_stage(stage)[1] in stages.ROPE_LAYOUT_OPS and array.shape[-1:] == (self.config.d_head,)
            else array
            for stage, array in found.items()
        }

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


def build_checked(spec: ModelSpec, config: ModelConfig, weights: WeightMap) -> CheckedModel:
    """Build `spec`'s model for (config, weights), checked; `Unsupported` passes through.

    The factory gets its own float32 copy of the weights, so it cannot change the caller's: a dict, or
    for `LazyWeights` (a mapped checkpoint too large to hold) a view copying each weight when looked up.
    """
    __tracebackhide__ = True
    call = f"{spec.name} factory(config={config.family} d_model={config.d_model} n_layers={config.n_layers}, weights)"
    if isinstance(weights, LazyWeights):
        copy: WeightMap = weights.map(lambda name, w: np.array(w, dtype=np.float32))
    else:
        copy = {name: np.array(w, dtype=np.float32) for name, w in weights.items()}
    context = isolation.Context(spec.imported)
    # A program's runs have their own timeout (--timeout), which the call's deadline must not cut short.
    deadline = isolation.call_timeout()
    program_timeout = getattr(spec.factory, "timeout_s", None)
    if isinstance(program_timeout, float):
        deadline = max(deadline, program_timeout + isolation.GRACE_S)
    factory = spec.factory

    def build() -> Any:
        return factory(config, copy)  # type: ignore[arg-type]  # a mapping where the checkpoint is mapped

    model = guarded_call(spec.name, call, context, deadline, build, rule="factory")
    if model is None or not any(callable(getattr(model, m, None)) for m in ("logits", "greedy")):
        raise ContractViolation(spec.name, "has-logits", call, f"returned {type(model).__name__} without logits()")
    return CheckedModel(model, spec.name, config, spec.factory, context, deadline)


# The models (by name) a call of which missed its deadline in this run: they are not called again.
_HUNG: dict[str, str] = {}


def forget_hung() -> None:
    """Call again the models an earlier run in this process gave up on (`verifier.check` called again,
    where another model may have the name): the pytest plugin, as each run starts."""
    _HUNG.clear()


def guarded_call(
    name: str,
    call: str,
    context: isolation.Context,
    deadline_s: float,
    run: Callable[[], Any],
    *,
    rule: str = "no-exception",
    hint: str = "",
) -> Any:
    """`run()`, a call into model `name`, under `isolation.guarded`; `Unsupported` passes through, and an exception
    (its message followed by `hint`), an exit or a missed deadline is a ContractViolation of `rule`,
    `keeps-the-process` or `returns-in-time`."""
    __tracebackhide__ = True
    if name in _HUNG:  # waiting a deadline again, for each example Hypothesis shrinks, would take hours
        raise ContractViolation(
            name, "returns-in-time", call, f"not called: an earlier call did not return ({_HUNG[name]})"
        )
    try:
        with isolation.guarded(context, deadline_s):
            return run()
    except Unsupported:  # an input the model declares it cannot take (e.g. a prompt it cannot encode)
        raise
    except isolation.ModelExited as e:
        raise ContractViolation(name, "keeps-the-process", call, f"called {e.how}") from None
    except isolation.CallTimedOut as e:
        _HUNG[name] = f"{call} did not return within {e.seconds:g} s"
        raise ContractViolation(
            name, "returns-in-time", call, f"did not return within {e.seconds:g} s (interrupted; --call-timeout)"
        ) from None
    except Exception as e:
        raise ContractViolation(name, rule, call, f"raised {type(e).__name__}: {e}{hint}") from e
