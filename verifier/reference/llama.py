"""Llama's parts of the forward pass: RMSNorm, RoPE on q and k, grouped-query heads, SwiGLU.

Weights are the canonical set (HF `LlamaForCausalLM` names; nn.Linear weights are
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


def embed(w: WeightMap, c: ModelConfig, tokens: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """tokens [B, T] -> token embedding [B, T, d_model] in `dtype`; positions enter later, through RoPE."""
    return L.lookup(w["model.embed_tokens.weight"], tokens, dtype)


def norm(w: WeightMap, c: ModelConfig, i: int, which: str, x: np.ndarray) -> np.ndarray:
    """RMSNorm before attention (input_layernorm) or before the MLP: [B, T, d_model]."""
    name = "input_layernorm" if which == "attn" else "post_attention_layernorm"
    return L.rms_norm(x, w[f"model.layers.{i}.{name}.weight"], c.norm_eps)


def rope(c: ModelConfig, positions: np.ndarray, dtype: np.dtype) -> RopeTables:
    """The cos, sin tables [B, T, d_head/2] of the positions [B, T] in `dtype`, shared by every layer."""
    cos, sin = L.rope_tables(positions, c.d_head, c.rope_theta)
    return cos.astype(dtype), sin.astype(dtype)


def qkv(
    w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, rope: RopeTables, stage: Stage
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, T, d_model] -> q [B, n_heads, T, d_head], k, v [B, n_kv_heads, T, d_head]; RoPE on q, k."""
    p = f"model.layers.{i}.self_attn."
    q = stage(layer_stage(i, "q"), L.split_heads(L.linear(h, w[p + "q_proj.weight"].T), c.n_heads))
    k = stage(layer_stage(i, "k"), L.split_heads(L.linear(h, w[p + "k_proj.weight"].T), c.n_kv_heads))
    v = stage(layer_stage(i, "v"), L.split_heads(L.linear(h, w[p + "v_proj.weight"].T), c.n_kv_heads))
    cos, sin = rope
    q = stage(layer_stage(i, "q_rope"), L.apply_rope(q, cos, sin))
    k = stage(layer_stage(i, "k_rope"), L.apply_rope(k, cos, sin))
    return q, k, v


def attn_out(w: WeightMap, c: ModelConfig, i: int, attn: np.ndarray) -> np.ndarray:
    """Output projection o_proj: [B, T, d_model] -> [B, T, d_model]."""
    return L.linear(attn, w[f"model.layers.{i}.self_attn.o_proj.weight"].T)


def mlp(w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, stage: Stage) -> np.ndarray:
    """SwiGLU, down(silu(gate(h)) * up(h)): [B, T, d_model] -> [B, T, d_ff] -> [B, T, d_model]."""
    p = f"model.layers.{i}.mlp."
    gate = stage(layer_stage(i, "mlp_gate"), L.linear(h, w[p + "gate_proj.weight"].T))
    up = stage(layer_stage(i, "mlp_up"), L.linear(h, w[p + "up_proj.weight"].T))
    act = stage(layer_stage(i, "mlp_act"), L.silu(gate) * up)
    return L.linear(act, w[p + "down_proj.weight"].T)


def final_norm(w: WeightMap, c: ModelConfig, x: np.ndarray) -> np.ndarray:
    """model.norm, an RMSNorm: [B, T, d_model] -> [B, T, d_model]."""
    return L.rms_norm(x, w["model.norm.weight"], c.norm_eps)
