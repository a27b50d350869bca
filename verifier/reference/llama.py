"""The Llama layout's parts of the forward pass: RMSNorm, RoPE on q and k, grouped-query heads, a gated
MLP, and the switches the other families add (see `verifier.model.config`).

Weights are the canonical set (HF `LlamaForCausalLM` names and their siblings'; nn.Linear weights are
[d_out, d_in], so a projection is `h @ W.T`; q/k rows are in rotate-half order).
Each function takes the weights `w`, the config `c` and, inside a block, the layer index `i`.
"""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.stages import layer_stage
from verifier.model.weights import WeightMap
from verifier.reference import layers as L
from verifier.reference.recorder import RopeTables, Stage

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
    """RoPE's inverse frequencies [d_head/2] in float64, scaled as `c.rope_scaling` says."""
    base, s = L.rope_frequencies(c.d_head, c.rope_theta), c.rope_scaling
    if s is None:
        return base
    if s.kind == "linear":
        return L.linear_scaled_frequencies(base, s.factor)
    return L.llama3_scaled_frequencies(base, s.factor, s.low_freq_factor, s.high_freq_factor, s.original_n_ctx)


def rope(c: ModelConfig, positions: np.ndarray, dtype: np.dtype) -> RopeTables:
    """The cos, sin tables [B, T, d_head/2] of the positions [B, T] in `dtype`, shared by every layer."""
    cos, sin = L.rope_tables(positions, c.d_head, c.rope_theta, inv_freq(c))
    return cos.astype(dtype), sin.astype(dtype)


def _projection(w: WeightMap, prefix: str, h: np.ndarray, bias: bool) -> np.ndarray:
    """h @ W.T, plus the bias where the config has one: [B, T, d_in] -> [B, T, d_out]."""
    return L.linear(h, w[prefix + "weight"].T, w[prefix + "bias"] if bias else None)


def qkv(
    w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, rope: RopeTables, stage: Stage
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, T, d_model] -> q [B, n_heads, T, d_head], k, v [B, n_kv_heads, T, d_head]; with qk_norm an
    RMSNorm over each head's q and k (Qwen3), then RoPE on q, k."""
    p = f"model.layers.{i}.self_attn."
    q = stage(layer_stage(i, "q"), L.split_heads(_projection(w, p + "q_proj.", h, c.qkv_bias), c.n_heads))
    k = stage(layer_stage(i, "k"), L.split_heads(_projection(w, p + "k_proj.", h, c.qkv_bias), c.n_kv_heads))
    v = stage(layer_stage(i, "v"), L.split_heads(_projection(w, p + "v_proj.", h, c.qkv_bias), c.n_kv_heads))
    if c.qk_norm:  # before RoPE: the norm sees each head's vector as projected
        q = stage(layer_stage(i, "q_norm"), _rms_norm(c, q, w[p + "q_norm.weight"]))
        k = stage(layer_stage(i, "k_norm"), _rms_norm(c, k, w[p + "k_norm.weight"]))
    cos, sin = rope
    q = stage(layer_stage(i, "q_rope"), L.apply_rope(q, cos, sin))
    k = stage(layer_stage(i, "k_rope"), L.apply_rope(k, cos, sin))
    return q, k, v


def attn_out(w: WeightMap, c: ModelConfig, i: int, attn: np.ndarray) -> np.ndarray:
    """Output projection o_proj (with its bias where there is one): [B, T, d_model] -> [B, T, d_model]."""
    return _projection(w, f"model.layers.{i}.self_attn.o_proj.", attn, c.o_bias)


def mlp(w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, stage: Stage) -> np.ndarray:
    """down(act(gate(h)) * up(h)), act silu (SwiGLU) or tanh GELU (GeGLU, Gemma):
    [B, T, d_model] -> [B, T, d_ff] -> [B, T, d_model]."""
    p = f"model.layers.{i}.mlp."
    gate = stage(layer_stage(i, "mlp_gate"), L.linear(h, w[p + "gate_proj.weight"].T))
    up = stage(layer_stage(i, "mlp_up"), L.linear(h, w[p + "up_proj.weight"].T))
    act = L.silu(gate) if c.mlp_act == "silu" else L.gelu_tanh(gate)
    act = stage(layer_stage(i, "mlp_act"), act * up)
    return L.linear(act, w[p + "down_proj.weight"].T)


def final_norm(w: WeightMap, c: ModelConfig, x: np.ndarray) -> np.ndarray:
    """model.norm, the family's RMSNorm: [B, T, d_model] -> [B, T, d_model]."""
    return _rms_norm(c, x, w["model.norm.weight"])
