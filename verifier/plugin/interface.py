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

Two declared capabilities describe models that are not batched or give only the next token:

    "last_logits"   logits(tokens) gives the last position's logits only: [T] -> [V], [B, T] -> [B, V]
                    (and decode the chunk's last position); the suite runs every prefix
    "unbatched"     logits and decode take one sequence [T] at a time; the suite runs a batch row by row

Capabilities are detected from the methods a model has, or declared by a `capabilities`
attribute (a set of the names above) when detection would be wrong; "last_logits" and
"unbatched" are never detected, so a model that has them declares its whole set.

A factory that cannot build a config raises `Unsupported` with the reason; the suite then draws
other configs. A factory declares the configs its model runs with a `constraints` attribute (a
`Constraints`, or a tuple of them for "any of these"), so that the suite draws only those:

    build.constraints = Constraints(families=("gpt2",), d_ff=gpt2_d_ff, tie_embeddings=True, norm_eps=1e-5)
    build.constraints = Constraints(families=("llama",), switches=())   # plain Llama: no RoPE scaling, ...

A family's fixed pieces (Qwen3's q/k norm, Gemma's 1 + w) come with the family; the switches a family
leaves free (`verifier.model.config.FAMILY_SWITCHES`: RoPE scaling, attention biases, a head_dim that
is not d_model / n_heads, a sliding window, ...) are drawn too unless `switches` names the ones it runs.
A factory that runs a family but not one of its switches must refuse (or declare) it: ignoring it fails.

A model method may raise `Unsupported` too, for an input it declares it cannot take (a prompt its
tokenizer cannot encode); the property then draws another input.

A model that does not compute in float32 declares its **precision class** with a `precision`
attribute on the model (or on the factory): a class name of `verifier.analysis.precision`
("float32", "tf32", "float16", "bfloat16", "q8_0", "q4_0") or a `Precision` object (e.g.
`precision.q8_0(group_size=64, float16_scales=False)`). It is judged by that class's bounds, and a
quantized class against the oracle on its dequantized weights. A model that declares nothing is
float32.

A Llama model whose trace holds each head's q and k (before and after RoPE) in the interleaved order
its code rotates (pairs (2i, 2i + 1), as Meta's llama and llama2.c do) declares it with a
`rope_layout` attribute on the model (or on the factory): `rope_layout = "interleaved"`. The suite
reads those stages in the rotate-half order of `transformers` ("rotate_half", the default) and
reorders a declared interleaved trace to it (`verifier.model.stages.to_rotate_half`).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from verifier.model.config import FAMILIES, FAMILY_SWITCHES, Family, ModelConfig
from verifier.model.presets import gpt2_d_ff, llama2c_hidden_dim
from verifier.model.unsupported import Unsupported as Unsupported  # part of this interface: re-exported
from verifier.model.weights import Weights

# Each capability, and the call that provides it (shown in skip reasons and errors).
CAPABILITIES: dict[str, str] = {
    "logits": "logits(tokens) -> every position's logits: [T] -> [T, V], [B, T] -> [B, T, V]",
    "last_logits": "logits(tokens) -> the last position's logits only: [T] -> [V], [B, T] -> [B, V] (declared)",
    "unbatched": "logits and decode take one sequence, tokens [T], at a time (declared)",
    "decode": "decode(tokens, cache=None) -> (logits, cache), a KV-cached chunk",
    "trace": "trace(tokens [T]) -> {stage name: array}",
    "attention_mask": "logits(tokens, attention_mask=[B, T] of 0/1) for left-padded batches",
    "greedy": "greedy(prompt [T], n_new) -> n_new argmax token ids",
}

# The method each capability needs (`attention_mask` is a parameter of `logits`; `unbatched` none).
METHOD: dict[str, str | None] = {
    "logits": "logits", "last_logits": "logits", "unbatched": None, "decode": "decode", "trace": "trace",
    "attention_mask": "logits", "greedy": "greedy",
}  # fmt: skip

# What properties may require beyond the capabilities themselves: "logits" in either form, and a batch.
REQUIREMENTS: dict[str, str] = {
    "logits": "logits in either form: every position ('logits') or the last one ('last_logits')",
    "batch": "logits or decode of a batch [B, T] (a model without 'unbatched')",
}


def provides(capabilities: frozenset[str], needed: str) -> bool:
    """Whether a model with `capabilities` meets a property's requirement `needed` (a capability,
    or one of REQUIREMENTS)."""
    if needed == "logits":
        return bool({"logits", "last_logits"} & capabilities)
    if needed == "batch":
        return "unbatched" not in capabilities and bool({"logits", "last_logits", "decode"} & capabilities)
    return needed in capabilities


def lacking(model: str, capabilities: frozenset[str], needed: str) -> str | None:
    """None if `capabilities` meet `needed`, else the reason a property needing it skips."""
    if provides(capabilities, needed):
        return None
    if needed == "batch" and "unbatched" in capabilities:
        return f"model {model!r} takes one sequence at a time (it declares 'unbatched'): it has no batch to check"
    what = REQUIREMENTS.get(needed) or CAPABILITIES[needed]
    return f"model {model!r} has no {needed!r} capability ({what})"


@runtime_checkable
class Model(Protocol):
    """What every model under test has: logits for every position."""

    def logits(self, tokens: np.ndarray) -> np.ndarray: ...


Factory = Callable[[ModelConfig, Weights], Any]


# The switches a family may leave free (the ModelConfig fields of `FAMILY_SWITCHES`), in its order.
SWITCHES: tuple[str, ...] = tuple(dict.fromkeys(name for _, free in FAMILY_SWITCHES.values() for name in free))


def switches_on(config: ModelConfig) -> tuple[str, ...]:
    """The free switches of its family that `config` turns on (in SWITCHES order): a field that changes the
    math, so a head_dim equal to d_model / n_heads, or a query_scale equal to d_head, is off; `layer_types`
    is on when layers differ in kind (local/global alternation), `sliding_window` when a layer has one."""
    free = FAMILY_SWITCHES[config.family][1]
    layers = range(config.n_layers)
    on = {
        "head_dim": config.head_dim is not None and config.head_dim * config.n_heads != config.d_model,
        "rope_scaling": config.rope_scaling is not None,
        "qkv_bias": config.qkv_bias,
        "o_bias": config.o_bias,
        "sliding_window": any(config.window(i) is not None for i in layers),
        "layer_types": len({config.layer_type(i) for i in layers}) > 1,
        "attn_softcap": config.attn_softcap is not None,
        "final_softcap": config.final_softcap is not None,
        "query_scale": config.query_scale is not None and config.query_scale != config.d_head,
        # A MoE family's experts and top-k are its MLP's sizes, as d_ff is a dense MLP's: never a switch on.
        "n_experts": False,
        "top_k": False,
        "d_expert": config.d_expert is not None and config.d_expert != config.d_ff,
        "norm_topk": config.norm_topk,
        "d_shared_expert": config.d_shared_expert is not None,
        "dense_layers": bool(config.dense_layers),
        "rotary_dim": config.rotated_dims != config.d_head,
        "nope_layers": bool(config.nope_layers),
    }
    return tuple(name for name in SWITCHES if name in free and on[name])


def describe_rule(rule: Callable[[int], int]) -> str:
    """`gpt2_d_ff(d_model)`, `llama2c_hidden_dim(d_model, multiple_of=4)`: a d_ff rule as its call."""
    if isinstance(rule, functools.partial):
        keywords = "".join(f", {k}={v!r}" for k, v in rule.keywords.items())
        return f"{describe_rule(rule.func).removesuffix('(d_model)')}(d_model{keywords})"
    return f"{getattr(rule, '__name__', repr(rule))}(d_model)"


@dataclass(frozen=True)
class Constraints:
    """The configs a factory's model runs, declared as `build.constraints = Constraints(...)`, so
    that the suite draws only those (no property filters its examples away). Unset fields allow
    any value; a tuple of Constraints declares a model that runs the configs of any of them.

    - `families`: the families it runs ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
      "mixtral", "qwen2_moe", "phi3", "glm").
    - `switches`: the free switches of those families it runs (names of SWITCHES: "rope_scaling",
      "qkv_bias", "sliding_window", "rotary_dim", "d_shared_expert", ...); None runs every one, () the
      families' plain form only (a MoE family's plain form has its routed experts: n_experts and top_k
      are sizes, never refused by `switches`).
    - `d_ff`: the MLP width as a function of d_model: `gpt2_d_ff` (4 x d_model), `llama2c_hidden_dim`
      (llama2.c model.py's rule, multiple_of 32), or `functools.partial(llama2c_hidden_dim, multiple_of=256)`.
    - `tie_embeddings`: True for a tied-only classifier, False for an untied-only one.
    - `norm_eps`, `rope_theta`: the one value a model hard-codes.
    - `grouped_query`: False for a model without grouped-query attention (n_kv_heads == n_heads only).
    - `max_n_ctx`: the longest context it runs.
    - `block`: a quantized format's block length (Q8_0's 32): every weight matrix's input width
      (`ModelConfig.matrix_inputs`: d_model, n_heads x d_head, d_ff, the experts') a multiple of it.
    - `supports`: a predicate for what the fields cannot say (configs it returns False for are
      drawn and then filtered out, so prefer the fields where they can).
    """

    families: tuple[Family, ...] = FAMILIES
    d_ff: Callable[[int], int] | None = None
    tie_embeddings: bool | None = None
    norm_eps: float | None = None
    rope_theta: float | None = None
    grouped_query: bool = True
    max_n_ctx: int | None = None
    supports: Callable[[ModelConfig], bool] | None = None
    switches: tuple[str, ...] | None = None
    block: int | None = None

    def __post_init__(self) -> None:
        families = tuple(self.families) if not isinstance(self.families, str) else (self.families,)
        object.__setattr__(self, "families", families)
        unknown = [f for f in families if f not in FAMILIES]
        if not families or unknown:
            raise ValueError(f"Constraints(families={families!r}): expected one or more of {FAMILIES}")
        if self.switches is not None:
            switches = (self.switches,) if isinstance(self.switches, str) else tuple(self.switches)
            object.__setattr__(self, "switches", switches)
            if [s for s in switches if s not in SWITCHES]:
                raise ValueError(f"Constraints(switches={switches!r}): expected names among {SWITCHES}")
        for name in ("d_ff", "supports"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Constraints({name}={value!r}): expected a function, found {type(value).__name__}")
        if self.max_n_ctx is not None and self.max_n_ctx < 1:
            raise ValueError(f"Constraints(max_n_ctx={self.max_n_ctx!r}): expected a positive number of positions")
        if self.block is not None and not (isinstance(self.block, int) and self.block >= 1):
            raise ValueError(f"Constraints(block={self.block!r}): expected a positive whole number of values")
        for name in ("norm_eps", "rope_theta"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"Constraints({name}={value!r}): expected a positive number")

    def refusal(self, config: ModelConfig) -> str | None:
        """None if the declaration admits `config`, else why not (`declared tie_embeddings=True; ...`)."""
        found = []
        if config.family not in self.families:
            found.append(f"families {list(self.families)}, not {config.family!r}")
        if self.d_ff is not None and config.d_ff != self.d_ff(config.d_model):
            found.append(f"d_ff = {describe_rule(self.d_ff)} = {self.d_ff(config.d_model)}, not {config.d_ff}")
        for name in ("tie_embeddings", "norm_eps"):
            want = getattr(self, name)
            if want is not None and getattr(config, name) != want:
                found.append(f"{name}={want!r}, not {getattr(config, name)!r}")
        if self.rope_theta is not None and config.uses_rope and config.rope_theta != self.rope_theta:
            found.append(f"rope_theta={self.rope_theta!r}, not {config.rope_theta!r}")
        if not self.grouped_query and config.n_kv_heads != config.n_heads:
            found.append(f"no grouped-query attention, not n_kv_heads={config.n_kv_heads} < n_heads={config.n_heads}")
        if self.max_n_ctx is not None and config.n_ctx > self.max_n_ctx:
            found.append(f"max_n_ctx={self.max_n_ctx}, not n_ctx={config.n_ctx}")
        if self.switches is not None:
            extra = [name for name in switches_on(config) if name not in self.switches]
            if extra:
                found.append(f"switches {list(self.switches)}, not {', '.join(_switch(config, s) for s in extra)}")
        if self.block is not None:
            ragged = [f"{name} {width}" for name, width in config.matrix_inputs().items() if width % self.block]
            if ragged:
                found.append(f"matrix input widths multiples of block={self.block}, not {', '.join(ragged)}")
        if not found and self.supports is not None and not self.supports(config):
            found.append("its supports(config) predicate returned False")
        return "declared " + "; ".join(found) if found else None

    def describe(self) -> str:
        """The declaration in one line: `gpt2; d_ff = gpt2_d_ff(d_model); tie_embeddings=True`."""
        parts = ["every family" if self.families == FAMILIES else "/".join(self.families)]
        if self.d_ff is not None:
            parts.append(f"d_ff = {describe_rule(self.d_ff)}")
        for name in ("tie_embeddings", "norm_eps", "rope_theta", "max_n_ctx", "block"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        if not self.grouped_query:
            parts.append("no grouped-query attention")
        if self.switches is not None and any(FAMILY_SWITCHES[f][1] for f in self.families):
            parts.append(f"switches {', '.join(self.switches)}" if self.switches else "no switches")
        if self.supports is not None:
            name = getattr(self.supports, "__name__", "<lambda>")
            parts.append(f"supports={name}" if name.isidentifier() else "a supports(config) predicate")
        return "; ".join(parts)


def _switch(config: ModelConfig, name: str) -> str:
    """`rope_scaling=RopeScaling(...)`: a switch and its value in `config`."""
    return f"{name}={getattr(config, name)!r}"


# The published shapes: GPT-2 (OpenAI's hparams) and llama2.c (model.py's rules, theta 10000,
# llama2.c's RMSNorm eps; tied or not; plain Llama, no switch), for `build.constraints` as they are or
# with `dataclasses.replace`.
GPT2_PUBLISHED = Constraints(families=("gpt2",), d_ff=gpt2_d_ff, tie_embeddings=True, norm_eps=1e-5, switches=())
LLAMA2C_PUBLISHED = Constraints(
    families=("llama",), d_ff=llama2c_hidden_dim, norm_eps=1e-5, rope_theta=10000.0, switches=()
)


def declared_constraints(factory: Any) -> tuple[Constraints, ...] | None:
    """The Constraints a factory declares by its `constraints` attribute (one, or a tuple for any of
    several), or None; TypeError for anything else."""
    declared = getattr(factory, "constraints", None)
    if declared is None:
        return None
    found = (declared,) if isinstance(declared, Constraints) else declared
    if not isinstance(found, tuple | list) or not found or not all(isinstance(c, Constraints) for c in found):
        raise TypeError(
            f"{getattr(factory, '__name__', factory)!r}.constraints is {declared!r}: expected a "
            "verifier.Constraints, or a tuple of them"
        )
    return tuple(found)


@dataclass(frozen=True)
class Deviation:
    """A difference from the oracle a model computes knowingly, declared as `build.deviations =
    Deviation(...)` (or a tuple of them), like scikit-learn's `expected_failed_checks`: where
    `property` (a test name, `test_logits_agree_with_the_oracle`) fails on a config of one of
    `families`, by at most `up_to` times the bound, the example is recorded, not failed, and the
    property reports "deviates (declared): reason" with the size measured; every other example, and
    a larger error, still fails. A declared deviation that did not happen is reported too."""

    property: str
    reason: str
    families: tuple[Family, ...] = FAMILIES
    up_to: float = math.inf

    def __post_init__(self) -> None:
        families = (self.families,) if isinstance(self.families, str) else tuple(self.families)
        object.__setattr__(self, "families", families)
        unknown = [f for f in families if f not in FAMILIES]
        if not self.property.startswith("test_") or not self.reason.strip() or not families or unknown:
            raise ValueError(
                f"Deviation({self.property!r}, {self.reason!r}, families={families!r}): expected a property's test "
                f"name (test_...), a reason, and families of {FAMILIES}"
            )
        if not self.up_to > 0:
            raise ValueError(f"Deviation({self.property!r}): up_to={self.up_to!r} must be above 0")

    def covers(self, prop: str, family: str) -> bool:
        return prop == self.property and family in self.families


def declared_deviations(factory: Any) -> tuple[Deviation, ...]:
    """The Deviations a factory declares by its `deviations` attribute (one, or a tuple); TypeError for
    anything else."""
    declared = getattr(factory, "deviations", None)
    if declared is None:
        return ()
    found = (declared,) if isinstance(declared, Deviation) else declared
    if not isinstance(found, tuple | list) or not all(isinstance(d, Deviation) for d in found):
        raise TypeError(
            f"{getattr(factory, '__name__', factory)!r}.deviations is {declared!r}: expected a verifier.Deviation, "
            "or a tuple of them"
        )
    return tuple(found)


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


def declared_logits_up_to_a_constant(model: Any, factory: Any = None) -> Any | None:
    """Whether a model's logits are defined only up to a constant per position (an unembedding centred over
    the vocabulary, as interpretability libraries keep it), declared by its `logits_up_to_a_constant`
    attribute, else its factory's, else None."""
    for holder in (model, factory):
        declared = getattr(holder, "logits_up_to_a_constant", None)
        if declared is not None:
            return declared
    return None


def declared_rope_layout(model: Any, factory: Any = None) -> Any | None:
    """The order of q/k in a model's trace, declared by its `rope_layout` attribute, else its factory's, else None."""
    for holder in (model, factory):
        declared = getattr(holder, "rope_layout", None)
        if declared is not None:
            return declared
    return None


def detected_capabilities(model: Any) -> frozenset[str]:
    """The capabilities a model's methods provide ("last_logits" and "unbatched" are declared only)."""
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
