"""GPT-2's parts of the forward pass: learned positions, LayerNorm, fused qkv, GELU MLP.

Weights are the canonical set (HF `GPT2LMHeadModel` names; Conv1D weights are [d_in, d_out]).
Each function takes the weights `w`, the config `c` and, inside a block, the layer index `i`.
"""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.stages import layer_stage
from verifier.model.weights import WeightMap
from verifier.reference import layers as L
from verifier.reference.recorder import Stage


def embed(w: WeightMap, c: ModelConfig, tokens: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """tokens, positions [B, T] -> token embedding + position embedding [B, T, d_model] in `dtype`."""
    wte, wpe = w["transformer.wte.weight"], w["transformer.wpe.weight"]
    return L.lookup(wte, tokens, dtype) + L.lookup(wpe, positions, dtype)


def norm(w: WeightMap, c: ModelConfig, i: int, which: str, x: np.ndarray) -> np.ndarray:
    """ln_1 (before attention) or ln_2 (before the MLP) of layer i: [B, T, d_model]."""
    p = f"transformer.h.{i}.{'ln_1' if which == 'attn' else 'ln_2'}."
    return L.layer_norm(x, w[p + "weight"], w[p + "bias"], c.norm_eps)


def rope(c: ModelConfig, positions: np.ndarray, dtype: np.dtype) -> None:
    """GPT-2 has no RoPE: its positions entered with the embedding."""
    return None


def qkv(
    w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, rope: None, stage: Stage
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B, T, d_model] -> c_attn [B, T, 3 d_model] -> q, k, v, each [B, n_heads, T, d_head]."""
    p = f"transformer.h.{i}.attn.c_attn."
    fused = L.linear(h, w[p + "weight"], w[p + "bias"])
    q, k, v = (L.split_heads(part, c.n_heads) for part in np.split(fused, 3, axis=-1))
    q, k, v = (stage(layer_stage(i, op), x) for op, x in (("q", q), ("k", k), ("v", v)))
    return q, k, v


def attn_out(w: WeightMap, c: ModelConfig, i: int, attn: np.ndarray) -> np.ndarray:
    """Output projection c_proj: [B, T, d_model] -> [B, T, d_model]."""
    p = f"transformer.h.{i}.attn.c_proj."
    return L.linear(attn, w[p + "weight"], w[p + "bias"])


def mlp(w: WeightMap, c: ModelConfig, i: int, h: np.ndarray, stage: Stage) -> np.ndarray:
    """[B, T, d_model] -> c_fc [B, T, d_ff] -> GELU (tanh form) -> c_proj [B, T, d_model]."""
    p = f"transformer.h.{i}.mlp."
    up = stage(layer_stage(i, "mlp_up"), L.linear(h, w[p + "c_fc.weight"], w[p + "c_fc.bias"]))
    act = stage(layer_stage(i, "mlp_act"), L.gelu_tanh(up))
    return L.linear(act, w[p + "c_proj.weight"], w[p + "c_proj.bias"])


def final_norm(w: WeightMap, c: ModelConfig, x: np.ndarray) -> np.ndarray:
    """ln_f: [B, T, d_model] -> [B, T, d_model]."""
    return L.layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], c.norm_eps)
