"""A Llama written the llama2.c way, in PyTorch: one sequence at a time, the next token's logits only.

As in llama2.c's model.py: RMSNorm, RoPE on interleaved pairs (2i, 2i + 1) turned as complex
numbers, grouped-query attention by repeating the kv heads, a SwiGLU MLP whose hidden size comes from
`dim` by model.py's rule (4 dim, 2/3 of it, rounded up to a multiple of `multiple_of`), theta 10000,
a classifier tied to the token embedding. Its forward takes the tokens of one sequence and returns
the logits of the next token, [vocab_size], as an inference engine does.

So the model declares the two capabilities of such code, "last_logits" (the suite runs every
prefix) and "unbatched" (the suite runs a batch row by row), and its factory declares its shapes:

    verifier check --model examples.llama2c_style:build

The factory only renames the canonical weights and turns `transformers`' rotate-half q/k rows back
into llama2.c's interleaved order (the inverse of the permutation llama2.c's export applies).
Shapes: T positions, H heads, KV kv heads, D = d_head.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from verifier import LLAMA2C_PUBLISHED, ModelConfig, Unsupported


@dataclass(frozen=True)
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    max_seq_len: int
    multiple_of: int = 32
    norm_eps: float = 1e-5


def hidden_dim(args: ModelArgs) -> int:
    hidden = int(2 * (4 * args.dim) / 3)
    return args.multiple_of * ((hidden + args.multiple_of - 1) // args.multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> Tensor:
    """[end, dim / 2] complex: e^(i p theta^(-2j / dim)) for position p and pair j."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    return torch.polar(torch.ones(end, dim // 2), torch.outer(torch.arange(end).float(), freqs))


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """x [T, heads, D] with pairs (2j, 2j + 1) turned by freqs_cis [T, D / 2]."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs_cis[:, None, :]).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: Tensor, freqs_cis: Tensor) -> Tensor:
        """[T, dim] -> [T, dim]."""
        T = x.shape[0]
        q = apply_rotary_emb(self.wq(x).view(T, self.n_heads, self.head_dim), freqs_cis)
        k = apply_rotary_emb(self.wk(x).view(T, self.n_kv_heads, self.head_dim), freqs_cis)
        v = self.wv(x).view(T, self.n_kv_heads, self.head_dim)
        group = self.n_heads // self.n_kv_heads  # query head h reads kv head h // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / self.head_dim**0.5  # [H, T, T]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out = torch.einsum("hts,shd->thd", F.softmax(scores, dim=-1), v)
        return self.wo(out.reshape(T, -1))


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        hidden = hidden_dim(args)
        self.w1 = nn.Linear(args.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention, self.feed_forward = Attention(args), FeedForward(args)
        self.attention_norm, self.ffn_norm = RMSNorm(args.dim, args.norm_eps), RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: Tensor, freqs_cis: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.output.weight = self.tok_embeddings.weight  # weight tying, as model.py does
        self.register_buffer("freqs_cis", precompute_freqs_cis(args.dim // args.n_heads, args.max_seq_len))

    @torch.no_grad()
    def forward(self, tokens: Tensor) -> Tensor:
        """tokens [T] -> the next token's logits [vocab_size]."""
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs_cis[: len(tokens)])
        return self.output(self.norm(h[-1]))


# ---- the plug-in: everything below is lm-verifier's side ----------------------------------------


class NextToken:
    """The model under test: one sequence [T] in, the next token's logits [V] out."""

    capabilities = frozenset({"last_logits", "unbatched"})

    def __init__(self, model: Transformer) -> None:
        self.model = model.eval()

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.model(torch.from_numpy(tokens)).numpy()


RENAMES = {"model.embed_tokens": "tok_embeddings", "model.norm": "norm", "model.layers": "layers",
           "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
           "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
           "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
           "post_attention_layernorm": "ffn_norm"}  # fmt: skip
SHAPES = dataclasses.replace(LLAMA2C_PUBLISHED, tie_embeddings=True)  # multiple_of 32, theta 10000, eps 1e-5


def interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows of each head from rotate-half order (all first members, then all second) to pairs (2j, 2j + 1)."""
    return w.reshape(n_heads, 2, -1, w.shape[1]).transpose(0, 2, 1, 3).reshape(w.shape)


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> NextToken:
    reason = SHAPES.refusal(config)  # what this code cannot express
    if reason:
        raise Unsupported(f"this Llama has llama2.c's shapes only: {reason}")
    args = ModelArgs(
        config.d_model, config.n_layers, config.n_heads, config.n_kv_heads, config.vocab_size, config.n_ctx
    )
    state = {}
    for name, array in weights.items():
        if name.endswith("q_proj.weight"):
            array = interleaved(array, config.n_heads)
        elif name.endswith("k_proj.weight"):
            array = interleaved(array, config.n_kv_heads)
        for theirs, ours in RENAMES.items():
            name = name.replace(theirs, ours)
        state[name] = torch.from_numpy(np.ascontiguousarray(array))
    state["output.weight"] = state["tok_embeddings.weight"]
    model = Transformer(args)
    missing = set(model.load_state_dict(state, strict=False).missing_keys) - {"freqs_cis"}  # computed, not loaded
    if missing:
        raise ValueError(f"weights missing: {sorted(missing)}")
    return NextToken(model)


build.constraints = SHAPES  # type: ignore[attr-defined]
