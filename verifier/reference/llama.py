"""The Llama layout's parts of the forward pass: RMSNorm, RoPE on q and k, grouped-query heads, a gated
MLP, and the switches the other families add (see `verifier.model.config`).

Weights are the canonical set (HF `LlamaForCausalLM` names and their siblings'; nn.Linear weights are
[d_out, d_in], so a projection is `h @ W.T`; q/k rows are in rotate-half order).
Each function takes the weights `w`, the config `c` and, inside a block, the layer index `i`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.stages import layer_stage
from verifier.model.weights import WeightMap, expert_names, moe_prefix
from verifier.reference import layers as L
from verifier.reference.recorder import RopeTables, Stage, passing

# The RMSNorm weight before attention and before the MLP, by `which`; with Gemma 2's sandwich norms
# `post_attention_layernorm` follows attention and `pre_feedforward_layernorm` precedes the MLP.
_NORMS = {"attn": "input_layernorm", "mlp": "post_attention_layernorm"}
_SANDWICH_NORMS = {
    "attn": "input_layernorm",
    "attn_post": "post_attention_layernorm",
    "mlp": "pre_feedforward_layernorm",
    "mlp_post": "post_feedforward_layernorm",
}


def embed(w: WeightMap, c: ModelConfig, tokens: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """tokens [B, T] -> token embedding [B, T, d_model] in `dtype`; positions enter later, through RoPE.
    (Gemma's normaliser, `embed_normaliser`, is applied by the caller, which knows the model's format.)"""
    return L.lookup(w["model.embed_tokens.weight"], tokens, dtype)


def embed_normaliser(c: ModelConfig, dtype: np.dtype) -> np.ndarray | None:
    """Gemma's sqrt(d_model) as a 0-d array in `dtype` (it is a tensor of the model's dtype in
    `transformers`, so a bfloat16 model multiplies by the rounded value); None without `embed_scale`."""
    return np.asarray(np.sqrt(c.d_model), dtype=dtype) if c.embed_scale else None


def _rms_norm(c: ModelConfig, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """The family's RMSNorm: times `gain` (Llama, Qwen), or times 1 + `gain` (Gemma)."""
    return L.rms_norm_plus_one(x, gain, c.norm_eps) if c.norm_plus_one else L.rms_norm(x, gain, c.norm_eps)


def norm(w: WeightMap, c: ModelConfig, i: int, which: str, x: np.ndarray) -> np.ndarray:
    """Layer i's RMSNorm `which`: "attn" (before attention), "mlp" (before the MLP), and with
    sandwich norms "attn_post" / "mlp_post" (after each): [B, T, d_model]."""
    name = (_SANDWICH_NORMS if c.sandwich_norm else _NORMS)[which]
    return _rms_norm(c, x, w[f"model.layers.{i}.{name}.weight"])


def inv_freq(c: ModelConfig) -> np.ndarray:
    """RoPE's inverse frequencies [r/2] in float64 (r = `c.rotated_dims`: d_head, or the partial rotary
    dims, over which the frequencies are spread), scaled as `c.rope_scaling` says."""
    base, s = L.rope_frequencies(c.rotated_dims, c.rope_theta), c.rope_scaling
    if s is None:
        return base
    if s.kind == "linear":
        return L.linear_scaled_frequencies(base, s.factor)
    return L.llama3_scaled_frequencies(base, s.factor, s.low_freq_factor, s.high_freq_factor, s.original_n_ctx)


def rope(c: ModelConfig, positions: np.ndarray, dtype: np.dtype) -> RopeTables:
    """The cos, sin tables [B, T, r/2] of the positions [B, T] in `dtype`, shared by every layer
    (r = `c.rotated_dims`)."""
    cos, sin = L.rope_tables(positions, c.rotated_dims, c.rope_theta, inv_freq(c))
    return cos.astype(dtype), sin.astype(dtype)


def _projection(w: WeightMap, prefix: str, h: np.ndarray, bias: bool) -> np.ndarray:
    """h @ W.T, plus the bias where the config has one: [B, T, d_in] -> [B, T, d_out]."""
    return L.linear(h, w[prefix + "weight"].T, w[prefix + "bias"] if bias else None)


def fused_qkv_split(w: WeightMap, c: ModelConfig, prefix: str, h: np.ndarray) -> list[np.ndarray]:
    """Phi-3's `qkv_proj` [(n_heads + 2 n_kv_heads) d_head, d_model]: one product, its columns sliced q
    then k then v: [B, T, d_model] -> [B, T, n_heads d_head], 2 x [B, T, n_kv_heads d_head]."""
    q_end = c.n_heads * c.d_head
    fused = L.linear(h, w[prefix + "qkv_proj.weight"].T)
    return np.split(fused, [q_end, q_end + c.n_kv_heads * c.d_head], axis=-1)


def _rotate(c: ModelConfig) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The rotation of `c.rope_pairs`: pairs (i, i + r/2), or (2i, 2i + 1) (GLM)."""
    return L.apply_rope_interleaved if c.rope_pairs == "interleaved" else L.apply_rope


def qkv(
    w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, rope: RopeTables, stage: Stage
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, T, d_model] -> q [B, n_heads, T, d_head], k, v [B, n_kv_heads, T, d_head]; with qk_norm an
    RMSNorm over each head's q and k (Qwen3; OLMo 2's over the whole projection), then RoPE on q, k (on
    each head's first rotary_dim dims; none on a NoPE layer)."""
    p = f"model.layers.{i}.self_attn."
    if c.fused_qkv:
        projected = fused_qkv_split(w, c, p, h)
    else:
        projected = [_projection(w, p + f"{x}_proj.", h, c.qkv_bias) for x in "qkv"]
    q = stage(layer_stage(i, "q"), L.split_heads(projected[0], c.n_heads))
    k = stage(layer_stage(i, "k"), L.split_heads(projected[1], c.n_kv_heads))
    v = stage(layer_stage(i, "v"), L.split_heads(projected[2], c.n_kv_heads))
    if c.qk_norm_whole:  # OLMo 2: over the whole projection, before the heads are split
        q_normed, k_normed = (
            _rms_norm(c, x, w[p + f"{n}_norm.weight"]) for x, n in zip(projected[:2], "qk", strict=True)
        )
        q = stage(layer_stage(i, "q_norm"), L.split_heads(q_normed, c.n_heads))
        k = stage(layer_stage(i, "k_norm"), L.split_heads(k_normed, c.n_kv_heads))
    elif c.qk_norm:  # before RoPE: the norm sees each head's vector as projected
        q = stage(layer_stage(i, "q_norm"), _rms_norm(c, q, w[p + "q_norm.weight"]))
        k = stage(layer_stage(i, "k_norm"), _rms_norm(c, k, w[p + "k_norm.weight"]))
    if c.rotates(i):
        cos, sin = rope
        q, k = (L.partial_rope(x, cos, sin, _rotate(c)) for x in (q, k))
    # a NoPE layer's (SmolLM3's) q_rope and k_rope are q and k: where RoPE would be, nothing is done
    return stage(layer_stage(i, "q_rope"), q), stage(layer_stage(i, "k_rope"), k), v


def attn_out(w: WeightMap, c: ModelConfig, i: int, attn: np.ndarray) -> np.ndarray:
    """Output projection o_proj (with its bias where there is one): [B, T, d_model] -> [B, T, d_model]."""
    return _projection(w, f"model.layers.{i}.self_attn.o_proj.", attn, c.o_bias)


def _activation(c: ModelConfig) -> Callable[[np.ndarray], np.ndarray]:
    """The gate's activation: silu (SwiGLU), or tanh GELU (GeGLU, Gemma)."""
    return L.silu if c.mlp_act == "silu" else L.gelu_tanh


def gate_up(w: WeightMap, c: ModelConfig, prefix: str, h: np.ndarray) -> list[np.ndarray]:
    """h's gate and up projections [B, T, d_ff] each; a fused `gate_up_proj` [2 d_ff, d_model] holds
    the gate's rows first (transformers' `gate, up = x.chunk(2, -1)`)."""
    if c.fused_gate_up:
        return np.split(L.linear(h, w[prefix + "gate_up_proj.weight"].T), 2, axis=-1)
    return [L.linear(h, w[prefix + "gate_proj.weight"].T), L.linear(h, w[prefix + "up_proj.weight"].T)]


def mlp(w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, stage: Stage) -> np.ndarray:
    """A dense layer's down(act(gate(h)) * up(h)), act silu (SwiGLU) or tanh GELU (GeGLU, Gemma):
    [B, T, d_model] -> [B, T, d_ff] -> [B, T, d_model]."""
    p = f"model.layers.{i}.mlp."
    gate, up = gate_up(w, c, p, h)
    gate = stage(layer_stage(i, "mlp_gate"), gate)
    up = stage(layer_stage(i, "mlp_up"), up)
    act = stage(layer_stage(i, "mlp_act"), _activation(c)(gate) * up)
    return L.linear(act, w[p + "down_proj.weight"].T)


def route(c: ModelConfig, probs: np.ndarray, chosen: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each token's experts and their weights: probs [..., n_experts] -> (chosen int [..., top_k], weights
    [..., top_k]). The top_k most probable unless `chosen` is given (the oracle's other choice at a
    near-tie); weights are their probabilities, renormalised to sum 1 where `c.norm_topk`."""
    if chosen is None:
        chosen = L.top_k_experts(probs, c.top_k)
    weights = np.take_along_axis(probs, chosen, axis=-1)
    return chosen, L.renormalise(weights) if c.norm_topk else weights


def moe(
    w: WeightMap,
    c: ModelConfig,
    i: int,
    h: np.ndarray,
    stage: Stage,
    chosen: np.ndarray | None = None,
    inner: Stage = passing,
) -> np.ndarray:
    """A MoE layer: [B, T, d_model] -> [B, T, d_model], the router's chosen experts' gated MLPs weighted
    (`route`), plus Qwen2-MoE's shared expert times sigmoid(h w_s^T). `chosen` [B, T, top_k] overrides
    the router's choice (see `NumpyModel.logits`'s `routes`); the experts used, int [B, T, top_k], are the
    `experts` stage. `inner(stage, value)` rounds each expert's
    gate, up and product as a dense layer's mlp_gate, mlp_up and mlp_act stages are rounded (at a narrower
    precision; they are not stages of a MoE layer, so nothing records them).

    Experts are read one at a time, each for the tokens that chose it; one no token chose is not read.
    """
    B, T, d = h.shape
    p = moe_prefix(c, i)
    probs = stage(layer_stage(i, "router_probs"), L.router_probs(h, w[p + "gate.weight"]))
    chosen, weights = route(c, probs, chosen)
    chosen = stage(layer_stage(i, "experts"), chosen)
    k = chosen.shape[-1]
    flat, chosen, weights = h.reshape(-1, d), chosen.reshape(-1, k), weights.reshape(-1, k)
    out = np.zeros_like(flat)
    for e in range(c.n_experts):
        token, slot = np.nonzero(chosen == e)
        if token.size:  # in expert order, as transformers adds them
            out[token] += weights[token, slot, None] * _expert(w, c, i, expert_names(c, i, e), flat[token], inner)
    if c.d_shared_expert is not None:
        s = p + "shared_expert."
        names = (s + "gate_proj.weight", s + "up_proj.weight", s + "down_proj.weight")
        out += L.sigmoid_gated(_expert(w, c, i, names, flat, inner), flat, w[p + "shared_expert_gate.weight"])
    return out.reshape(B, T, d)


def _expert(
    w: WeightMap, c: ModelConfig, i: int, names: tuple[str, str, str], x: np.ndarray, inner: Stage
) -> np.ndarray:
    """One expert of layer i, down(act(x W_gate^T) * (x W_up^T)) with the gate, up, down weights `names`, on
    the tokens x [N, d_model] that chose it -> [N, d_model], rounded by `inner` as `moe` says. Its weights
    are let go on return: a streamed pass holds one expert at a time."""
    gate_w, up_w, down_w = (w[name].T for name in names)
    gate = inner(layer_stage(i, "mlp_gate"), L.linear(x, gate_w))
    up = inner(layer_stage(i, "mlp_up"), L.linear(x, up_w))
    return L.linear(inner(layer_stage(i, "mlp_act"), _activation(c)(gate) * up), down_w)


def final_norm(w: WeightMap, c: ModelConfig, x: np.ndarray) -> np.ndarray:
    """model.norm, the family's RMSNorm: [B, T, d_model] -> [B, T, d_model]."""
    return _rms_norm(c, x, w["model.norm.weight"])
