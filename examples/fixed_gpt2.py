"""A GPT-2 with the published shapes only, written in PyTorch the way minimal GPT repositories are.

Its config has the sizes such code has (vocab, context, width, layers, heads) and nothing else:
the MLP is fixed at 4 x d_model, the classifier is tied to the token embedding, LayerNorm's eps is
1e-5, positions are learned. So its factory declares those constraints, and the suite draws only
those configs. It traces the life of a tensor without touching the model, through forward hooks.

    verifier check --model examples.fixed_gpt2:build             # conforms
    verifier check --model examples.fixed_gpt2:build_erf_gelu    # fails at layers.0.mlp_act

`build_erf_gelu` is the same model with `nn.GELU()`'s default, the exact erf form, where GPT-2 uses
the tanh approximation (a common slip: PyTorch's default is erf): it differs by up to 5e-4 per
activation, and the suite names the MLP activation as the first divergent stage.

Shapes: B batch, T positions, C = d_model, H heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from verifier import GPT2_PUBLISHED, ModelConfig, Unsupported


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int
    n_embd: int
    n_layer: int
    n_head: int
    gelu: str = "tanh"  # "none" is nn.GELU's default, the exact erf form


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size)).bool())

    def forward(self, x: Tensor) -> Tensor:
        """[B, T, C] -> [B, T, C]: softmax(q k^T / sqrt(C / H), causal) v, heads merged, projected."""
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # [B, H, T, T]
        att = F.softmax(att.masked_fill(~self.bias[:T, :T], float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate=config.gelu)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd, eps=1e-5), CausalSelfAttention(config)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd, eps=1e-5), MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.wte, self.wpe = (
            nn.Embedding(config.vocab_size, config.n_embd),
            nn.Embedding(config.block_size, config.n_embd),
        )
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx: Tensor) -> Tensor:
        """idx [B, T] -> logits [B, T, vocab_size]."""
        pos = torch.arange(idx.shape[1])
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ---- the plug-in: everything below is lm-verifier's side ----------------------------------------


class Traced:
    """The model under test: NumPy in and out, and a trace read from forward hooks."""

    def __init__(self, model: GPT) -> None:
        self.model = model.eval()

    @torch.no_grad()
    def logits(self, tokens: np.ndarray) -> np.ndarray:
        out = self.model(torch.from_numpy(np.atleast_2d(tokens)))
        return out.numpy() if np.ndim(tokens) == 2 else out[0].numpy()

    @torch.no_grad()
    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The stages hooks can see (a subset of the suite's: no scores, probs or resid_attn)."""
        stages: dict[str, np.ndarray] = {}

        def keep(name: str, split: bool = False):  # type: ignore[no-untyped-def]
            def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
                if not split:
                    stages[name] = output[0].numpy()
                    return
                C = output.shape[-1] // 3
                for part, t in zip("qkv", output[0].split(C, -1), strict=True):  # [T, C] -> [H, T, C / H]
                    stages[f"{name}.{part}"] = (
                        t.view(t.shape[0], self.model.h[0].attn.n_head, -1).transpose(0, 1).numpy()
                    )

            return hook

        m = self.model
        hooks = [(m.drop, "embed"), (m.ln_f, "final_norm"), (m.lm_head, "logits")]
        for i, block in enumerate(m.h):
            hooks += [(block.ln_1, f"layers.{i}.attn_norm"), (block.attn, f"layers.{i}.attn_out"),
                      (block.ln_2, f"layers.{i}.mlp_norm"), (block.mlp.c_fc, f"layers.{i}.mlp_up"),
                      (block.mlp.gelu, f"layers.{i}.mlp_act"), (block.mlp, f"layers.{i}.mlp_out"),
                      (block, f"layers.{i}.resid_mlp")]  # fmt: skip
        handles = [module.register_forward_hook(keep(name)) for module, name in hooks]
        handles += [
            block.attn.c_attn.register_forward_hook(keep(f"layers.{i}", split=True)) for i, block in enumerate(m.h)
        ]
        try:
            self.model(torch.from_numpy(tokens)[None])
        finally:
            for handle in handles:
                handle.remove()
        return stages


def _build(config: ModelConfig, weights: dict[str, np.ndarray], gelu: str) -> Traced:
    reason = GPT2_PUBLISHED.refusal(config)  # what this code cannot express
    if reason:
        raise Unsupported(f"this GPT-2 has the published shapes only: {reason}")
    model = GPT(GPTConfig(config.vocab_size, config.n_ctx, config.d_model, config.n_layers, config.n_heads, gelu))
    state = {}
    for name, array in weights.items():
        ours = name.removeprefix("transformer.")
        conv1d = ours.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))  # Conv1D [in, out] -> Linear
        state[ours] = torch.from_numpy(array.T.copy() if conv1d else array)
    state["lm_head.weight"] = state["wte.weight"]
    missing = model.load_state_dict(state, strict=False).missing_keys
    if [key for key in missing if not key.endswith("attn.bias")]:  # the causal mask is a buffer, not a weight
        raise ValueError(f"weights missing: {missing}")
    return Traced(model)


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> Traced:
    return _build(config, weights, "tanh")


def build_erf_gelu(config: ModelConfig, weights: dict[str, np.ndarray]) -> Traced:
    return _build(config, weights, "none")


build.constraints = build_erf_gelu.constraints = GPT2_PUBLISHED  # type: ignore[attr-defined]
