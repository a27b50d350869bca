"""A small GPT-2 written in PyTorch from the math, plugged into lm-verifier as a user would.

This is what a third-party implementation looks like: its own modules and parameter names, its
own weight layout (nn.Linear's [d_out, d_in], where GPT-2's checkpoints store Conv1D's
[d_in, d_out]), its own KV cache. Only `build` at the bottom knows about the suite:

    pytest --model examples.torch_gpt2:build
    verifier check --model examples.torch_gpt2:build

Shapes: B batch, T new positions, S positions attended to (cache + new).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from verifier.model.config import ModelConfig
from verifier.plugin.interface import Unsupported

Record = Callable[[str, Tensor], None]
KVCache = tuple[tuple[Tensor, Tensor], ...]  # per layer: keys, values [B, n_heads, S, d_head]


def _ignore(name: str, value: Tensor) -> None:
    pass


@dataclass(frozen=True)
class Sizes:
    vocab_size: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    eps: float
    tied: bool


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * gain + bias over the last axis, biased variance."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.gain, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

    def forward(self, x: Tensor) -> Tensor:
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain + self.bias


def gelu_tanh(x: Tensor) -> Tensor:
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class Attention(nn.Module):
    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.n_heads = s.n_heads
        self.qkv, self.proj = nn.Linear(s.d_model, 3 * s.d_model), nn.Linear(s.d_model, s.d_model)

    def forward(self, x: Tensor, allowed: Tensor, past: tuple[Tensor, Tensor] | None, record: Record, i: int):
        """x [B, T, d_model], allowed [B, 1, T, S] -> [B, T, d_model], and this layer's keys and values."""
        B, T, d_model = x.shape
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in self.qkv(x).split(d_model, dim=-1))
        for name, t in (("q", q), ("k", k), ("v", v)):
            record(f"layers.{i}.{name}", t)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, n_heads, T, S]
        shifted = scores.masked_fill(~allowed, -math.inf)
        e = (shifted - shifted.amax(-1, keepdim=True)).exp()
        probs = e / e.sum(-1, keepdim=True)
        out = (probs @ v).transpose(1, 2).reshape(B, T, d_model)
        record(f"layers.{i}.scores", scores)
        record(f"layers.{i}.probs", probs)
        record(f"layers.{i}.attn", out)
        return self.proj(out), (k, v)


class Block(nn.Module):
    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2 = LayerNorm(s.d_model, s.eps), Attention(s), LayerNorm(s.d_model, s.eps)
        self.fc, self.out = nn.Linear(s.d_model, s.d_ff), nn.Linear(s.d_ff, s.d_model)

    def forward(self, x: Tensor, allowed: Tensor, past: tuple[Tensor, Tensor] | None, record: Record, i: int):
        """Pre-norm: x + attn(norm1(x)), then + mlp(norm2(.)); [B, T, d_model] -> [B, T, d_model]."""
        h = self.norm1(x)
        record(f"layers.{i}.attn_norm", h)
        a, kv = self.attn(h, allowed, past, record, i)
        record(f"layers.{i}.attn_out", a)
        x = x + a
        record(f"layers.{i}.resid_attn", x)
        h = self.norm2(x)
        record(f"layers.{i}.mlp_norm", h)
        up = self.fc(h)
        record(f"layers.{i}.mlp_up", up)
        act = gelu_tanh(up)
        record(f"layers.{i}.mlp_act", act)
        m = self.out(act)
        record(f"layers.{i}.mlp_out", m)
        x = x + m
        record(f"layers.{i}.resid_mlp", x)
        return x, kv


class GPT(nn.Module):
    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(s.vocab_size, s.d_model), nn.Embedding(s.n_ctx, s.d_model)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.n_layers))
        self.norm_f = LayerNorm(s.d_model, s.eps)
        self.head = None if s.tied else nn.Linear(s.d_model, s.vocab_size, bias=False)

    def forward(
        self, tokens: Tensor, cache: KVCache | None = None, pad: Tensor | None = None, record: Record = _ignore
    ) -> tuple[Tensor, KVCache]:
        """tokens [B, T] after `cache` -> logits [B, T, vocab_size] and a new cache (the old one is untouched).

        `pad` [B, T] is True at left-padding: padded keys are hidden, positions count real tokens.
        """
        B, T = tokens.shape
        past = 0 if cache is None else cache[0][0].shape[2]
        positions = torch.arange(past, past + T).expand(B, T)
        allowed = torch.ones(T, past + T, dtype=torch.bool).tril(past)[None, None]  # [1, 1, T, S]
        if pad is not None:
            positions = ((~pad).cumsum(1) - 1).clamp(min=0)
            allowed = allowed & (~pad[:, None, None, :] | torch.eye(T, dtype=torch.bool))
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        record("embed", x)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, allowed, None if cache is None else cache[i], record, i)
            new_cache.append(kv)
        x = self.norm_f(x)
        record("final_norm", x)
        logits = x @ self.tok_emb.weight.T if self.head is None else self.head(x)
        record("logits", logits)
        return logits, tuple(new_cache)


# --8<-- [start:plugin] (docs/how-to shows this part of the file)
class TorchGPT2:
    """The model under test: NumPy in and out, as the suite's contract asks."""

    def __init__(self, model: GPT) -> None:
        self.model = model.eval()

    @torch.no_grad()
    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        batch = torch.from_numpy(np.atleast_2d(tokens))
        pad = None if attention_mask is None else torch.from_numpy(np.atleast_2d(attention_mask) == 0)
        out, _ = self.model(batch, pad=pad)
        return out.numpy() if np.ndim(tokens) == 2 else out[0].numpy()

    @torch.no_grad()
    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        out, new_cache = self.model(torch.from_numpy(np.atleast_2d(tokens)), cache)
        return (out.numpy() if np.ndim(tokens) == 2 else out[0].numpy()), new_cache

    @torch.no_grad()
    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        stages: dict[str, np.ndarray] = {}
        self.model(torch.from_numpy(tokens)[None], record=lambda name, t: stages.__setitem__(name, t[0].numpy()))
        return stages


# The plug-in: lm-verifier calls build(config, weights) with its config and the canonical weights
# (float32 arrays named and laid out as transformers' GPT2LMHeadModel state dict).
RENAMES = {"transformer.wte": "tok_emb", "transformer.wpe": "pos_emb", "transformer.h": "blocks", "ln_1": "norm1",
           "ln_2": "norm2", "c_attn": "qkv", "attn.c_proj": "attn.proj", "mlp.c_fc": "fc", "mlp.c_proj": "out",
           "transformer.ln_f": "norm_f", "lm_head": "head", "norm1.weight": "norm1.gain", "norm2.weight": "norm2.gain",
           "norm_f.weight": "norm_f.gain"}  # fmt: skip


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> TorchGPT2:
    if config.family != "gpt2":
        raise Unsupported(f"this example implements GPT-2 only, not {config.family!r}")
    sizes = Sizes(config.vocab_size, config.n_ctx, config.d_model, config.n_layers, config.n_heads, config.d_ff,
                  config.norm_eps, config.tie_embeddings)  # fmt: skip
    state = {}
    for name, array in weights.items():
        for theirs, ours in RENAMES.items():
            name = name.replace(theirs, ours)
        conv1d = array.ndim == 2 and not name.startswith(("tok_emb", "pos_emb", "head"))
        state[name] = torch.from_numpy(array.T.copy() if conv1d else array)  # Conv1D [d_in, d_out] -> Linear
    model = GPT(sizes)
    model.load_state_dict(state, strict=True)
    return TorchGPT2(model)


# --8<-- [end:plugin]
