"""A GPT-2 in plain NumPy (picoGPT style), plugged into lm-verifier as a user would: it needs no
torch, so it runs on the core install (`pip install lm-verifier`, no extra).

It has only `logits` (no KV cache, no trace): the suite runs the properties that need no more and
skips the others, saying why. Only `build` at the bottom knows about the suite:

    verifier check --model examples.numpy_gpt2:build

Shapes: T positions, d d_model, h heads.
"""

from __future__ import annotations

import numpy as np

from verifier.model.config import ModelConfig
from verifier.plugin.interface import Unsupported


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(var + eps) + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w + b  # GPT-2's Conv1D layout: w [d_in, d_out]


def attention(x: np.ndarray, w: dict[str, np.ndarray], n_heads: int) -> np.ndarray:
    """[T, d] -> [T, d]: causal multi-head self-attention."""
    T = x.shape[0]
    q, k, v = np.split(linear(x, w["attn.c_attn.weight"], w["attn.c_attn.bias"]), 3, axis=-1)
    q, k, v = (m.reshape(T, n_heads, -1).transpose(1, 0, 2) for m in (q, k, v))  # [h, T, d/h]
    hidden = np.triu(np.ones((T, T), dtype=bool), 1)
    scores = np.where(hidden, -np.inf, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]))
    out = (softmax(scores) @ v).transpose(1, 0, 2).reshape(T, -1)
    return linear(out, w["attn.c_proj.weight"], w["attn.c_proj.bias"])


def gpt2(tokens: np.ndarray, w: dict[str, np.ndarray], n_layers: int, n_heads: int, eps: float) -> np.ndarray:
    """tokens [T] -> logits [T, vocab_size]."""
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][: len(tokens)]
    for i in range(n_layers):
        p = f"transformer.h.{i}."
        block = {name.removeprefix(p): array for name, array in w.items() if name.startswith(p)}
        x = x + attention(layer_norm(x, block["ln_1.weight"], block["ln_1.bias"], eps), block, n_heads)
        h = layer_norm(x, block["ln_2.weight"], block["ln_2.bias"], eps)
        up = gelu(linear(h, block["mlp.c_fc.weight"], block["mlp.c_fc.bias"]))
        x = x + linear(up, block["mlp.c_proj.weight"], block["mlp.c_proj.bias"])
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w.get("lm_head.weight", w["transformer.wte.weight"]).T


# --8<-- [start:plugin] (docs/how-to shows this part of the file)
# The plug-in: lm-verifier calls build(config, weights) with its config and the canonical weights
# (float32 arrays named and laid out as transformers' GPT2LMHeadModel state dict).
class NumpyGPT2:
    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray]) -> None:
        self.config, self.weights = config, weights

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        c = self.config
        rows = [gpt2(row, self.weights, c.n_layers, c.n_heads, c.norm_eps) for row in np.atleast_2d(tokens)]
        return np.stack(rows) if np.ndim(tokens) == 2 else rows[0]


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> NumpyGPT2:
    if config.family != "gpt2":
        raise Unsupported(f"this example implements GPT-2 only, not {config.family!r}")
    return NumpyGPT2(config, weights)


# --8<-- [end:plugin]
