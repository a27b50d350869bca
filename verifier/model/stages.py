"""Stage names of the life of a tensor, and the shape each stage has.

A trace is a dict {stage name: array} for one sequence of T tokens. Names are `embed`,
`layers.{i}.{op}` for each layer i and op in `layer_ops(config, i)`, `final_norm` and `logits`.
Per-head tensors are [n_heads, T, d_head]; q and k (before and after RoPE) are in the `transformers`
(rotate-half) layout of the head dimension, which the suite reads. A trace may hold them in
another of `ROPE_LAYOUTS` (Meta's llama and llama2.c rotate interleaved pairs), which the model
then declares; `to_rotate_half` reorders such a stage. `scores` are the dot products q k^T scaled
by `config.attention_scale` (1/sqrt(d_head), or Gemma 2's query_pre_attn_scalar^-1/2) and
soft-capped where the family caps (Gemma 2's attn_softcap, before the mask); only entries the query
may see (on or below the diagonal, within its sliding window) are defined (elsewhere a model may hold
anything). `logits` are soft-capped where the family caps them (final_softcap).

The switches add stages: `q_norm`, `k_norm` (qk_norm: each head's q and k after its RMSNorm, before
RoPE, [heads, T, d_head]; with qk_norm_whole the norm spans every head of the projection, and the stage
holds its output split into heads); `attn_post_norm`, `mlp_post_norm` (sandwich_norm: the RMSNorm of the
attention output and of the MLP output, before each is added to the residual stream, [T, d_model]).
Without pre_norm (OLMo 2) there is no `attn_norm` or `mlp_norm`: attention and the MLP read the residual
stream itself.
Gemma's normaliser is part of `embed`, biases part of the projection they follow.
A MoE layer (`config.is_moe_layer(i)`) has `router_probs` (the softmax of the router logits,
[T, n_experts]) and `experts` (the indices of the experts each token used, as the model chose them,
int [T, top_k], in any order) in place of mlp_gate, mlp_up and mlp_act; its `mlp_out` is the weighted
sum of the chosen experts' outputs (plus the gated shared expert). `experts` holds indices, not values
(`INDEX_OPS`): it is compared as a set per token, and a model with the right probabilities that routes
wrongly (top-1 for top-2) shows its other choice there. With partial rotary, q_rope and k_rope hold the
rotated dims and the passed-through ones, in the head's own order; on a NoPE layer (`nope_layers`) they are
q and k. `stage_weights` names the canonical weights (`verifier.model.weights`) each stage is computed with.
"""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, moe_prefix, weight_shapes

EMBED = "embed"
FINAL_NORM = "final_norm"
LOGITS = "logits"

_GPT2_OPS = (
    "attn_norm", "q", "k", "v", "scores", "probs", "attn", "attn_out", "resid_attn",
    "mlp_norm", "mlp_up", "mlp_act", "mlp_out", "resid_mlp",
)  # fmt: skip
_LLAMA_OPS = (
    "attn_norm", "q", "k", "v", "q_rope", "k_rope", "scores", "probs", "attn", "attn_out", "resid_attn",
    "mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "mlp_out", "resid_mlp",
)  # fmt: skip

# What each stage holds, for a port's trace (the reference computes it so: `verifier.reference.model`).
HOLDS: dict[str, str] = {
    EMBED: "the token embeddings (GPT-2: plus the position embeddings; Gemma: times sqrt(d_model))",
    "attn_norm": "the residual stream normalised before attention (GPT-2: LayerNorm; else RMSNorm)",
    "q": "each query head, x W_q (+ its bias), before RoPE",
    "k": "each key head, x W_k (+ its bias), before RoPE",
    "v": "each value head, x W_v (+ its bias)",
    "q_norm": "each query head after its RMSNorm over d_head (OLMo 2: over all heads' n_heads d_head), before RoPE",
    "k_norm": "each key head after its RMSNorm over d_head (OLMo 2: over all kv heads' n_kv_heads d_head), before RoPE",
    "q_rope": "each query head after RoPE (with partial rotary, the rotated dims and the passed ones, in order; "
    "a NoPE layer's: q itself)",
    "k_rope": "each key head after RoPE (a NoPE layer's: k itself)",
    "scores": "q k^T times the attention scale, soft-capped where the family caps; compared where the query may "
    "look (on or below the diagonal, within its window): elsewhere it may hold anything (-inf, or unmasked)",
    "probs": "the softmax of the masked scores over the keys",
    "attn": "probs v, the heads merged",
    "attn_out": "attn W_o (+ its bias): the attention block's output",
    "attn_post_norm": "attn_out after its RMSNorm, before it is added to the residual stream",
    "resid_attn": "the residual stream after attention: its input plus attn_out (or attn_post_norm)",
    "mlp_norm": "the residual stream normalised before the MLP",
    "mlp_gate": "mlp_norm W_gate",
    "mlp_up": "mlp_norm W_up (GPT-2: mlp_norm W_fc + b_fc)",
    "mlp_act": "act(mlp_gate) * mlp_up, act SiLU or tanh-GELU (GPT-2: the tanh-GELU of mlp_up)",
    "router_probs": "the softmax of the router's logits over the experts",
    "experts": "the indices of the top_k experts each token used, in any order",
    "mlp_out": "the MLP's output, mlp_act W_down (+ its bias); a MoE layer's: the chosen experts' outputs "
    "weighted by their probabilities (plus the gated shared expert)",
    "mlp_post_norm": "mlp_out after its RMSNorm, before it is added to the residual stream",
    "resid_mlp": "the residual stream after the MLP: its input plus mlp_out (or mlp_post_norm)",
    FINAL_NORM: "the residual stream after the last block, normalised",
    LOGITS: "final_norm times the classifier (the token embedding when tied), soft-capped where the family caps",
}

# Stages whose entries above the diagonal are undefined: compare them on the lower triangle.
CAUSAL_OPS = frozenset({"scores"})
# Stages of integer indices, not values: never rounded, compared as a set per token (not by |diff|).
INDEX_OPS = frozenset({"experts"})

# The orders of each head's q and k a trace may hold, and what RoPE pairs in each: "rotate_half"
# (`transformers`, the order the suite reads) pairs (i, i + d_head/2); "interleaved" (Meta's llama,
# llama2.c, llama.cpp) pairs (2i, 2i + 1). They are one fixed permutation apart within each head
# (the one transformers' conversion script applies to q/k rows): interleaved 2i is rotate-half i,
# interleaved 2i + 1 is rotate-half i + d_head/2.
ROTATE_HALF = "rotate_half"
INTERLEAVED = "interleaved"
ROPE_LAYOUTS = (ROTATE_HALF, INTERLEAVED)
PAIRS = {ROTATE_HALF: "pairs (i, i + d_head/2)", INTERLEAVED: "pairs (2i, 2i + 1)"}
# The ops a RoPE layout orders (v is not paired, and the scores sum over the head dimension).
ROPE_LAYOUT_OPS = frozenset({"q", "k", "q_rope", "k_rope"})


def to_rotate_half(x: np.ndarray, layout: str) -> np.ndarray:
    """A stage [..., d_head] held in `layout` (one of ROPE_LAYOUTS), in rotate-half order."""
    if layout == ROTATE_HALF:
        return x
    if layout == INTERLEAVED:
        return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
    raise ValueError(f"unknown RoPE layout {layout!r}: expected one of {ROPE_LAYOUTS}")


def from_rotate_half(x: np.ndarray, layout: str) -> np.ndarray:
    """A stage [..., d_head] in rotate-half order, in `layout` (the inverse of `to_rotate_half`)."""
    if layout == ROTATE_HALF:
        return x
    if layout == INTERLEAVED:
        half = x.shape[-1] // 2
        return np.stack([x[..., :half], x[..., half:]], axis=-1).reshape(x.shape)
    raise ValueError(f"unknown RoPE layout {layout!r}: expected one of {ROPE_LAYOUTS}")


def layer_ops(config: ModelConfig, layer: int) -> tuple[str, ...]:
    """The ops of layer `layer`, in the order the forward pass computes them (the family's, and the
    stages its switches add): a MoE layer has `router_probs` and `experts` in place of mlp_gate, mlp_up,
    mlp_act."""
    if config.family == "gpt2":
        return _GPT2_OPS
    ops = list(_LLAMA_OPS)
    if config.is_moe_layer(layer):
        ops[ops.index("mlp_gate") : ops.index("mlp_out")] = ["router_probs", "experts"]
    if config.qk_norm:
        ops[ops.index("q_rope") : ops.index("q_rope")] = ["q_norm", "k_norm"]
    if config.sandwich_norm:
        ops.insert(ops.index("resid_attn"), "attn_post_norm")
        ops.insert(ops.index("resid_mlp"), "mlp_post_norm")
    if not config.pre_norm:  # OLMo 2: the sublayers read the residual stream itself
        ops.remove("attn_norm")
        ops.remove("mlp_norm")
    return tuple(ops)


def layer_stage(layer: int, op: str) -> str:
    """The stage name of `op` in layer `layer`, e.g. `layers.0.scores`."""
    return f"layers.{layer}.{op}"


def split_stage(stage: str) -> tuple[int | None, str]:
    """(layer, op) of a stage name; layer is None for `embed`, `final_norm`, `logits`."""
    if stage.startswith("layers."):
        _, layer, op = stage.split(".", 2)
        return int(layer), op
    return None, stage


def is_index_stage(stage: str) -> bool:
    """Whether `stage` holds indices (`INDEX_OPS`), e.g. `layers.0.experts`."""
    return split_stage(stage)[1] in INDEX_OPS


def _op_shape(config: ModelConfig, op: str, T: int) -> tuple[int, ...]:
    if op in ("q", "q_norm", "q_rope"):
        return (config.n_heads, T, config.d_head)
    if op in ("k", "v", "k_norm", "k_rope"):
        return (config.n_kv_heads, T, config.d_head)
    if op in ("scores", "probs"):
        return (config.n_heads, T, T)
    if op in ("mlp_gate", "mlp_up", "mlp_act"):
        return (T, config.d_ff)
    if op == "router_probs":
        return (T, config.n_experts)
    if op == "experts":
        return (T, config.top_k)
    if op == "attn":  # the heads merged: n_heads * d_head, which head_dim decouples from d_model
        return (T, config.n_heads * config.d_head)
    return (T, config.d_model)


def stage_shapes(config: ModelConfig, T: int) -> dict[str, tuple[int, ...]]:
    """Every stage of a trace of T tokens and the shape its formula gives, in compute order."""
    shapes: dict[str, tuple[int, ...]] = {EMBED: (T, config.d_model)}
    for layer in range(config.n_layers):
        for op in layer_ops(config, layer):
            shapes[layer_stage(layer, op)] = _op_shape(config, op, T)
    shapes[FINAL_NORM] = (T, config.d_model)
    shapes[LOGITS] = (T, config.vocab_size)
    return shapes


# The weights each op meets, relative to its layer's prefix; ops not listed meet none.
_GPT2_WEIGHTS = {
    "attn_norm": ("ln_1.weight", "ln_1.bias"),
    "q": ("attn.c_attn.weight", "attn.c_attn.bias"),
    "k": ("attn.c_attn.weight", "attn.c_attn.bias"),
    "v": ("attn.c_attn.weight", "attn.c_attn.bias"),
    "attn_out": ("attn.c_proj.weight", "attn.c_proj.bias"),
    "mlp_norm": ("ln_2.weight", "ln_2.bias"),
    "mlp_up": ("mlp.c_fc.weight", "mlp.c_fc.bias"),
    "mlp_out": ("mlp.c_proj.weight", "mlp.c_proj.bias"),
}
_LLAMA_WEIGHTS = {
    "attn_norm": ("input_layernorm.weight",),
    "q": ("self_attn.q_proj.weight",),
    "k": ("self_attn.k_proj.weight",),
    "v": ("self_attn.v_proj.weight",),
    "attn_out": ("self_attn.o_proj.weight",),
    "mlp_norm": ("post_attention_layernorm.weight",),
    "mlp_gate": ("mlp.gate_proj.weight",),
    "mlp_up": ("mlp.up_proj.weight",),
    "mlp_out": ("mlp.down_proj.weight",),
}
# What the switches change: biases join their projection; Gemma 2's norms are named by position.
_BIAS_WEIGHTS = {
    "q": ("self_attn.q_proj.bias",),
    "k": ("self_attn.k_proj.bias",),
    "v": ("self_attn.v_proj.bias",),
}
_QK_NORM_WEIGHTS = {"q_norm": ("self_attn.q_norm.weight",), "k_norm": ("self_attn.k_norm.weight",)}
_SANDWICH_WEIGHTS = {
    "attn_post_norm": ("post_attention_layernorm.weight",),
    "mlp_norm": ("pre_feedforward_layernorm.weight",),
    "mlp_post_norm": ("post_feedforward_layernorm.weight",),
}


# Fused layouts: q, k and v read one matrix, as do the gate and up projections.
_FUSED_QKV_WEIGHTS = {op: ("self_attn.qkv_proj.weight",) for op in ("q", "k", "v")}
_FUSED_GATE_UP_WEIGHTS = {op: ("mlp.gate_up_proj.weight",) for op in ("mlp_gate", "mlp_up")}


def _moe_weights(config: ModelConfig, layer: int, op: str) -> tuple[str, ...]:
    """A MoE layer's router (`router_probs`) and experts and shared expert (`mlp_out`), relative to the
    layer's prefix: every weight of its block but the router is met by `mlp_out`."""
    block = moe_prefix(config, layer)
    router = block + "gate.weight"
    names = [router] if op == "router_probs" else []
    if op == "mlp_out":
        names = [name for name in weight_shapes(config) if name.startswith(block) and name != router]
    return tuple(name.removeprefix(f"model.layers.{layer}.") for name in names)


def _layer_weights(config: ModelConfig, layer: int, op: str) -> tuple[str, ...]:
    """The weights `op` meets, relative to its layer's prefix."""
    if config.family == "gpt2":
        return _GPT2_WEIGHTS.get(op, ())
    if config.sandwich_norm and op in _SANDWICH_WEIGHTS:
        return _SANDWICH_WEIGHTS[op]
    if config.is_moe_layer(layer) and op in ("router_probs", "mlp_out"):
        return _moe_weights(config, layer, op)
    if config.fused_qkv and op in _FUSED_QKV_WEIGHTS:
        return _FUSED_QKV_WEIGHTS[op]
    if config.fused_gate_up and op in _FUSED_GATE_UP_WEIGHTS:
        return _FUSED_GATE_UP_WEIGHTS[op]
    names = _LLAMA_WEIGHTS.get(op, ()) + (_QK_NORM_WEIGHTS.get(op, ()) if config.qk_norm else ())
    if config.qkv_bias:
        names += _BIAS_WEIGHTS.get(op, ())
    if config.o_bias and op == "attn_out":
        names += ("self_attn.o_proj.bias",)
    return names


_LAYER_PREFIX = {"gpt2": "transformer.h.{}.", "llama": "model.layers.{}."}
_EMBED_WEIGHTS = {"gpt2": ("transformer.wte.weight", "transformer.wpe.weight"), "llama": ("model.embed_tokens.weight",)}
_FINAL_NORM_WEIGHTS = {"gpt2": ("transformer.ln_f.weight", "transformer.ln_f.bias"), "llama": ("model.norm.weight",)}


def stage_weights(config: ModelConfig, stage: str) -> tuple[str, ...]:
    """The canonical weight names `stage` is computed with (() for none), e.g. GPT-2's `layers.0.q`
    meets the fused `transformer.h.0.attn.c_attn.weight` and `.bias`; `logits` meets the classifier
    (the token embedding when tied)."""
    layout = "gpt2" if config.family == "gpt2" else "llama"
    layer, op = split_stage(stage)
    if layer is not None:
        return tuple(_LAYER_PREFIX[layout].format(layer) + name for name in _layer_weights(config, layer, op))
    if stage == EMBED:
        return _EMBED_WEIGHTS[layout]
    if stage == FINAL_NORM:
        return _FINAL_NORM_WEIGHTS[layout]
    if stage == LOGITS:
        return (EMBEDDING[config.family] if config.tie_embeddings else CLASSIFIER,)
    raise ValueError(f"unknown stage {stage!r}")
