"""A GPT-2 in the style of nanoGPT's model.py (PyTorch; the MLP fixed at 4 x n_embd, LayerNorm eps
1e-5, the classifier tied to wte, nn.GELU() with its exact erf default, scaled_dot_product_attention;
at inference its forward gives the last position's logits only, [B, 1, V]), and its adapter: a
faithful one (`build`, which the suite fails: GPT-2 uses the tanh GELU), and the same with the user's
one-line fix (`build_tanh_gelu`). Both declare the published GPT-2 shapes.

    --model tests.adapters.nanogpt:build
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from verifier import GPT2_PUBLISHED, ModelConfig, Unsupported

# ---- the model ------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias; eps 1e-5."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # [B, nh, T, hs]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.attn = LayerNorm(config.n_embd, config.bias), CausalSelfAttention(config)
        self.ln_2, self.mlp = LayerNorm(config.n_embd, config.bias), MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(config.vocab_size, config.n_embd),
                "wpe": nn.Embedding(config.block_size, config.n_embd),
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                "ln_f": LayerNorm(config.n_embd, config.bias),
            }
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        _b, t = idx.size()
        assert t <= self.config.block_size, (
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        )
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return self.lm_head(x[:, [-1], :]), None  # inference: the last position only


# ---- the adapter ----------------------------------------------------------------------------


class NanoGPT:
    capabilities = frozenset({"last_logits"})

    def __init__(self, model: GPT) -> None:
        self.model = model.eval()

    @torch.no_grad()
    def logits(self, tokens: np.ndarray) -> np.ndarray:
        logits, _ = self.model(torch.from_numpy(np.atleast_2d(tokens)))  # [B, 1, V]
        return logits[:, 0].numpy() if np.ndim(tokens) == 2 else logits[0, 0].numpy()


def _load(config: ModelConfig, weights: dict[str, np.ndarray]) -> GPT:
    reason = GPT2_PUBLISHED.refusal(config)
    if reason:
        raise Unsupported(f"nanoGPT's GPT fixes these: {reason}")
    model = GPT(GPTConfig(config.n_ctx, config.vocab_size, config.n_layers, config.n_heads, config.d_model))
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    state = {k: torch.from_numpy(w.T.copy() if k.endswith(transposed) else w) for k, w in weights.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state)
    return model


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> NanoGPT:
    return NanoGPT(_load(config, weights))


def build_tanh_gelu(config: ModelConfig, weights: dict[str, np.ndarray]) -> NanoGPT:
    model = _load(config, weights)
    for block in model.transformer.h:
        block.mlp.gelu = nn.GELU(approximate="tanh")  # GPT-2's GELU
    return NanoGPT(model)


build.constraints = build_tanh_gelu.constraints = GPT2_PUBLISHED  # type: ignore[attr-defined]
