"""Calling a model under test through its contract, so that every breach fails by name.

Properties never call a user's model directly: they call a `CheckedModel`, which validates each
answer (shape, dtype, finiteness, stage names) and turns an exception inside the model into a
`ContractViolation` naming the rule broken and the call that broke it. The two rules that take
more than one call, `deterministic` and `cache-reusable`, are checked by properties with drawn
inputs (test_agreement.py, test_kv_cache.py), whose messages quote RULES.
A model that declares "last_logits" is run on every prefix, and one that declares "unbatched" row by
row, so properties get every position of a batch from any model (`logits`), or ask for the last one.
`probe` builds a model on tiny configs of each kind once (the free shape, then the published
ones, or the factory's declared `Constraints`), for capability tables, skip reasons and the configs
the strategies draw.
The checks set `__tracebackhide__`, so pytest shows the property's call and the message, not them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.analysis.precision import FLOAT32, Precision, UnknownPrecision, resolve
from verifier.model import stages
from verifier.model.config import FAMILY_SWITCHES, Family, ModelConfig, RopeScaling
from verifier.model.presets import llama2c_hidden_dim
from verifier.model.stages import stage_shapes
from verifier.model.weights import LazyWeights, WeightMap, init_weights
from verifier.plugin import checkpoint
from verifier.plugin.interface import (
    CAPABILITIES,
    GPT2_PUBLISHED,
    LLAMA2C_PUBLISHED,
    METHOD,
    Constraints,
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

    def __init__(self, model: Any, name: str, config: ModelConfig, factory: Any = None) -> None:
        self.model = model
        self.name = name
        self.config = config
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

    def _call(self, method: str, call: str, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return getattr(self.model, method)(*args, **kwargs)
        except Unsupported:  # an input the model declares it cannot take (e.g. a prompt it cannot encode)
            raise
        except Exception as e:
            hint = ""
            if args and np.ndim(args[0]) == 2 and self.batched:
                hint = self._declare("if the model takes one sequence at a time", "unbatched")
            raise ContractViolation(self.name, "no-exception", call, f"raised {type(e).__name__}: {e}{hint}") from e

    def _as_array(self, value: Any, rule: str, call: str, what: str) -> np.ndarray:
        __tracebackhide__ = True
        if isinstance(value, np.ndarray):
            return value
        if not hasattr(value, "__array__"):
            raise ContractViolation(
                self.name, rule, call, f"{what} came back as type {type(value).__name__}, not an array"
            )
        try:
            return np.asarray(value)
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
    try:
        model = spec.factory(config, copy)  # type: ignore[arg-type]  # a mapping where the checkpoint is mapped
    except Unsupported:
        raise
    except Exception as e:
        raise ContractViolation(spec.name, "factory", call, f"raised {type(e).__name__}: {e}") from e
    if model is None or not any(callable(getattr(model, m, None)) for m in ("logits", "greedy")):
        raise ContractViolation(spec.name, "has-logits", call, f"returned {type(model).__name__} without logits()")
    return CheckedModel(model, spec.name, config, spec.factory)


# The kinds of config probed: each family; Llama plain, with grouped-query attention, and with Llama
# 3's RoPE scaling (family, n_heads, n_kv_heads). Heads have d_head 4 (d_model = 4 n_heads) unless
# PROBE_D_HEAD or a kind's switches set head_dim.
PROBE_KINDS: dict[str, tuple[Family, int, int]] = {
    "gpt2": ("gpt2", 2, 2),
    "llama": ("llama", 2, 2),
    "llama-gqa": ("llama", 4, 2),
    "llama3": ("llama", 4, 2),
    "mistral": ("mistral", 4, 2),
    "qwen2": ("qwen2", 4, 2),
    "qwen3": ("qwen3", 4, 2),
    "gemma": ("gemma", 4, 1),
    "gemma2": ("gemma2", 4, 2),
    "mixtral": ("mixtral", 4, 2),
    "qwen2_moe": ("qwen2_moe", 4, 2),
    "phi3": ("phi3", 4, 2),
    "glm": ("glm", 4, 2),
}
# GLM's heads are 8 wide so that its interleaved pairs differ from rotate-half ones (a rotated part of 2
# dims has one pair, the same in both); n_heads x d_head = d_model, as in its published checkpoints
# (GLM-4-9B: 32 x 128 = 4096), which is all llama.cpp's chatglm holds.
PROBE_D_HEAD = {"glm": 8}
# What each kind turns on beyond its family's fixed switches (Qwen2's q/k/v biases, Qwen3's q/k norm,
# Gemma's GeGLU, 1 + w norms and embedding scale come with the family): the switches its published
# checkpoints use, each where ignoring it changes the output, so that a factory that cannot run them
# refuses (or fails the properties) instead of passing as the plain Llama. "window" stands for the
# window W: smaller than the probe's n_ctx. head_dim 6 is not d_model / n_heads = 4. A MoE kind always
# has its experts (4, top-2: a router that chooses), whatever a declaration's switches: they are the
# family's MLP, not a switch of it (`MOE_SIZES`). Qwen2-MoE's as Qwen1.5-MoE's: experts narrower than
# the dense d_ff, a shared expert, no renormalisation. Partial rotary rotates half of each head.
PROBE_SWITCHES: dict[str, dict[str, Any]] = {
    "llama3": {"rope_scaling": "llama3"},
    "mistral": {"sliding_window": "window"},
    "qwen3": {"head_dim": 6},
    "gemma": {"head_dim": 6},
    "gemma2": {
        "head_dim": 6,
        "sliding_window": "window",
        "layer_types": ("sliding_attention", "full_attention"),
        "attn_softcap": 2.0,
        "final_softcap": 3.0,
        "query_scale": 8,
    },
    "mixtral": {"n_experts": 4, "top_k": 2},
    "qwen2_moe": {"n_experts": 4, "top_k": 2, "d_expert": 12, "d_shared_expert": 8},
    "phi3": {"rotary_dim": 2},
    "glm": {"rotary_dim": 4, "qkv_bias": True},
}
# The switches of a MoE kind every probe config has: without them it is not a config of its family.
MOE_SIZES = ("n_experts", "top_k")

FREE_SHAPE = Constraints()
# The shapes probed, in order, for a factory that declares no Constraints: a model runs a kind if it
# accepts any. The free shape first (d_ff unrelated to d_model), then the published ones: GPT-2,
# and llama2.c with each multiple_of its models use, tied (model.py) or not.
PROBE_SHAPES: dict[str, Constraints] = {
    "free shape": FREE_SHAPE,
    "GPT-2's published shape": GPT2_PUBLISHED,
    **{
        f"llama2.c's shape (multiple_of {m}, {'tied' if tied else 'untied'})": dataclasses.replace(
            LLAMA2C_PUBLISHED, d_ff=functools.partial(llama2c_hidden_dim, multiple_of=m), tie_embeddings=tied
        )
        for m in (32, 256, 4)
        for tied in (True, False)
    },
}


def _probe_switches(kind: str, n_ctx: int, shape: Constraints) -> dict[str, Any]:
    """The switches of `kind`'s probe config with `n_ctx` positions that `shape` admits (every one, if
    it names none)."""
    found: dict[str, Any] = {}
    for name, value in PROBE_SWITCHES.get(kind, {}).items():
        if shape.switches is not None and name not in shape.switches and name not in MOE_SIZES:
            continue
        if value == "window":  # a window the probe's positions exceed
            value = max(1, min(4, n_ctx - 1))
        elif name == "rope_scaling":  # Llama 3.1's bands; the probe's positions pass the original context
            value = RopeScaling("llama3", factor=8.0, original_n_ctx=max(1, n_ctx // 2))
        found[name] = value
    if "layer_types" in found and "sliding_window" not in found:
        del found["layer_types"]
    return found


def _tiny_config(kind: str, shape: Constraints) -> ModelConfig:
    """The tiny config of `kind` (one layer, two for local/global alternation; d_head 4 unless the kind
    sets it, 32 tokens, 16 positions) with `shape`'s values and the switches it admits; under a `block`,
    each matrix input width (`ModelConfig.matrix_inputs`) rounded up to a multiple of it."""
    family, n_heads, n_kv_heads = PROBE_KINDS[kind]
    if not shape.grouped_query and family != "llama":  # Llama's grouped-query attention is a kind of its own
        n_kv_heads = n_heads
    block = shape.block or 1
    step = math.lcm(2, block // math.gcd(n_heads, block))  # d_head even (RoPE's pairs), n_heads d_head in blocks
    d_head = _round_up(PROBE_D_HEAD.get(kind, 4), step)
    d_model = d_head * n_heads
    n_ctx = min(16, shape.max_n_ctx or 16)
    switches = _probe_switches(kind, n_ctx, shape)
    for name in ("d_expert", "d_shared_expert"):
        if name in switches:
            switches[name] = _round_up(switches[name], block)
    if "head_dim" in switches:  # a head_dim that is not d_model / n_heads, in blocks
        rounded = itertools.count(_round_up(switches["head_dim"], step), step)
        switches["head_dim"] = next(h for h in rounded if h != d_head)
    return ModelConfig(
        family=family,
        vocab_size=32,
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=len(switches.get("layer_types", ())) or 1,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=_round_up(24, block) if shape.d_ff is None else shape.d_ff(d_model),
        norm_eps=shape.norm_eps or 1e-5,
        tie_embeddings=family in ("gpt2", "gemma", "gemma2") if shape.tie_embeddings is None else shape.tie_embeddings,
        rope_theta=shape.rope_theta or 10000.0,
        **FAMILY_SWITCHES[family][0],
        **switches,
    )


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def probe_config(kind: str, shape: Constraints) -> ModelConfig | None:
    """The tiny config of `kind` in `shape`, or None if the shape excludes the kind (its family, Llama's
    grouped-query attention, or the switch that makes the kind, like llama3's RoPE scaling)."""
    family, n_heads, n_kv_heads = PROBE_KINDS[kind]
    if family not in shape.families or (family == "llama" and n_kv_heads < n_heads and not shape.grouped_query):
        return None
    config = _tiny_config(kind, shape)
    return config if probe_kind(config) == kind and shape.refusal(config) is None else None


# The free-shape probe config of each kind (every model that runs a kind at all in a free shape runs it).
PROBE_CONFIGS: dict[str, ModelConfig] = {kind: _tiny_config(kind, FREE_SHAPE) for kind in PROBE_KINDS}


@dataclass(frozen=True)
class Probe:
    """What building a model on a kind's probe configs gave: its capabilities and the shape of the
    config it accepted, or why there are none (each shape's reason)."""

    kind: str
    capabilities: frozenset[str]
    shape: Constraints | None = None
    unsupported: str | None = None
    error: str | None = None
    precision: str = ""  # the built model's precision class, and whether it declared it
    declared: bool = False
    quantized: bool = False  # the class compares next-token distributions with the original weights

    @classmethod
    def accepted(cls, kind: str, model: CheckedModel, shape: Constraints | None = None) -> Probe:
        """The probe of `kind` on which `model` was built (in `shape`)."""
        return cls(kind, model.capabilities, shape, precision=model.precision.label, declared=model.precision_declared,
                   quantized=model.precision.distribution is not None)  # fmt: skip

    def summary(self) -> str:
        """`logits, decode, ...` (and the shape, unless free), `unsupported (reason)`, or `broken (message)`."""
        if self.error is not None:
            return f"broken ({self.error})"
        if self.unsupported is not None:
            return f"unsupported ({self.unsupported})"
        found = ", ".join(c for c in CAPABILITIES if c in self.capabilities)
        return found if self.shape in (None, FREE_SHAPE) else f"{found} (on {self.shape.describe()})"


def _refusals(reasons: dict[str, str], shown: int = 3) -> str:
    """Each shape's reason for refusing (the first `shown` distinct ones), shapes with one reason together."""
    by_reason: dict[str, list[str]] = {}
    for label, reason in reasons.items():
        by_reason.setdefault(reason, []).append(label)
    if len(by_reason) == 1:
        return next(iter(by_reason))
    found = [f"{', '.join(labels)}: {reason}" for reason, labels in by_reason.items()]
    return "; ".join(found[:shown]) + (f"; and {len(found) - shown} more shapes refused" if len(found) > shown else "")


def probe_kind(config: ModelConfig) -> str:
    """The probe kind configs like `config` belong to: its family, and for Llama "llama3" with RoPE
    scaling, else "llama-gqa" with grouped-query attention, else "llama"."""
    if config.family != "llama":
        return config.family
    if config.rope_scaling is not None:
        return "llama3"
    return "llama-gqa" if config.n_kv_heads != config.n_heads else "llama"


def probe(spec: ModelSpec) -> list[Probe]:
    """Build `spec`'s model on each kind's probe configs (seeded weights), one per shape (its declared
    Constraints, else PROBE_SHAPES) until one is accepted, and record what it offers. With a fixed
    checkpoint (`--checkpoint`) whose kind every tiny probe was refused, the model is built on the
    checkpoint too: a model that runs only real sizes (llama.cpp's Q8_0 stores rows of 32) runs it."""
    probes = _tiny_probes(spec)
    fixed = checkpoint.current()
    if fixed is None:
        return probes
    kind = probe_kind(fixed.config)
    retry = spec.unselected(fixed.config.family) is None  # a family not selected stays refused
    return [_on_checkpoint(spec, p, fixed) if retry and p.kind == kind and p.unsupported else p for p in probes]


def _on_checkpoint(spec: ModelSpec, refused: Probe, fixed: checkpoint.FixedCheckpoint) -> Probe:
    """`refused` probed again on the checkpoint's config and weights."""
    try:
        model = build_on_checkpoint(spec, fixed)
    except Unsupported as e:
        return dataclasses.replace(refused, unsupported=f"{refused.unsupported}; the checkpoint: {e}")
    except ContractViolation as e:
        return Probe(refused.kind, frozenset(), error=str(e))
    return Probe.accepted(refused.kind, model)


_ON_CHECKPOINT: dict[tuple[str, int, checkpoint.FixedCheckpoint], CheckedModel] = {}


def build_on_checkpoint(spec: ModelSpec, fixed: checkpoint.FixedCheckpoint) -> CheckedModel:
    """`build_checked` on the checkpoint's config and weights, once: the last model built is kept (the
    probes and every property of a run use it; one full-size model at a time)."""
    key = (spec.name, id(spec.factory), fixed)
    if key not in _ON_CHECKPOINT:
        model = build_checked(spec, fixed.config, fixed.weights)
        _ON_CHECKPOINT.clear()
        _ON_CHECKPOINT[key] = model
    return _ON_CHECKPOINT[key]


def _tiny_probes(spec: ModelSpec) -> list[Probe]:
    shapes = {c.describe(): c for c in spec.constraints} if spec.constraints else PROBE_SHAPES
    probes = []
    for kind in PROBE_KINDS:
        unselected = spec.unselected(PROBE_KINDS[kind][0])
        if unselected is not None:
            probes.append(Probe(kind, frozenset(), unsupported=unselected))
            continue
        reasons: dict[str, str] = {}
        for label, shape in shapes.items():
            config = probe_config(kind, shape)
            if config is None:
                continue
            try:
                model = build_checked(spec, config, init_weights(config, seed=0))
            except Unsupported as e:
                reasons[label] = str(e) or type(e).__name__
            except ContractViolation as e:
                probes.append(Probe(kind, frozenset(), shape, error=str(e)))
                break
            else:
                probes.append(Probe.accepted(kind, model, shape))
                break
        else:
            if not reasons:
                reasons["declared"] = f"not among its declared constraints ({' | '.join(shapes)})"
            probes.append(Probe(kind, frozenset(), unsupported=_refusals(reasons)))
    return probes
