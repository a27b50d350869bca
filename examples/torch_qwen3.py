"""A Qwen3 written in PyTorch from the family reference alone (docs: "Port a family"), plugged into
lm-verifier as a user would. Qwen3 is the Llama layout with an RMSNorm over each head's q and k before
RoPE, and a head size of its own (`head_dim`); it may have attention biases.

    verifier check --model examples.torch_qwen3:build

It runs what it declares (`build.constraints`): Qwen3 configs with their own head_dim and attention
biases, not RoPE scaling or sliding windows. Shapes: B batch, T positions.
"""

from __future__ import annotations

# --8<-- [start:model] (docs/how-to/port-a-family.md shows this part of the file)
import numpy as np
import torch
from torch import Tensor

from verifier import Constraints, ModelConfig, Weights


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: Tensor, theta: float) -> Tensor:
    """Rotate-half RoPE on x [B, heads, T, d_head]: dim i is paired with i + d_head / 2."""
    d_head, T = x.shape[-1], x.shape[-2]
    inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, d_head / 2]
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1).to(x.dtype) for f in (torch.cos, torch.sin))
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class Qwen3:
    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.c = config
        self.w = {name: torch.from_numpy(np.array(value, dtype=np.float32)) for name, value in weights.items()}

    def _linear(self, x: Tensor, name: str) -> Tensor:
        bias = self.w.get(f"{name}.bias")
        return x @ self.w[f"{name}.weight"].T + (0 if bias is None else bias)

    def _attention(self, x: Tensor, i: int) -> Tensor:
        """x [B, T, d_model] -> [B, T, d_model]: grouped-query causal attention, q/k normed per head."""
        c, p = self.c, f"model.layers.{i}.self_attn"
        B, T, _ = x.shape
        q, k, v = (
            self._linear(x, f"{p}.{name}_proj").view(B, T, heads, c.d_head).transpose(1, 2)
            for name, heads in (("q", c.n_heads), ("k", c.n_kv_heads), ("v", c.n_kv_heads))
        )
        q = rope(rms_norm(q, self.w[f"{p}.q_norm.weight"], c.norm_eps), c.rope_theta)
        k = rope(rms_norm(k, self.w[f"{p}.k_norm.weight"], c.norm_eps), c.rope_theta)
        group = c.n_heads // c.n_kv_heads  # each key/value head serves `group` query heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / c.d_head**0.5  # [B, n_heads, T, T]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        probs = scores.masked_fill(~causal, -torch.inf).softmax(-1)
        return self._linear((probs @ v).transpose(1, 2).reshape(B, T, -1), f"{p}.o_proj")

    def _mlp(self, x: Tensor, i: int) -> Tensor:
        p = f"model.layers.{i}.mlp"
        gate, up = self._linear(x, f"{p}.gate_proj"), self._linear(x, f"{p}.up_proj")
        return self._linear(torch.nn.functional.silu(gate) * up, f"{p}.down_proj")

    @torch.no_grad()
    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [T] or [B, T] -> logits [T, V] or [B, T, V]."""
        c, w = self.c, self.w
        ids = torch.from_numpy(np.atleast_2d(np.asarray(tokens, dtype=np.int64)))
        x = w["model.embed_tokens.weight"][ids]
        for i in range(c.n_layers):
            x = x + self._attention(rms_norm(x, w[f"model.layers.{i}.input_layernorm.weight"], c.norm_eps), i)
            x = x + self._mlp(rms_norm(x, w[f"model.layers.{i}.post_attention_layernorm.weight"], c.norm_eps), i)
        classifier = w["model.embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"]
        out = (rms_norm(x, w["model.norm.weight"], c.norm_eps) @ classifier.T).numpy()
        return out if np.ndim(tokens) == 2 else out[0]


def build(config: ModelConfig, weights: Weights) -> Qwen3:
    return Qwen3(config, weights)


build.constraints = Constraints(families=("qwen3",), switches=("head_dim", "qkv_bias", "o_bias"))  # type: ignore[attr-defined]
# --8<-- [end:model]
