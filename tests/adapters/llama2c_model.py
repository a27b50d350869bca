"""A Llama in the style of llama2.c's model.py (PyTorch, batched [B, T]; RoPE on interleaved pairs
from precomputed cos/sin tables with theta 10000; grouped-query attention by repeating kv heads; the
hidden size given or derived from `multiple_of`; the classifier always tied to the token embedding; at
inference its forward gives the last position's logits, [B, 1, V]), and its adapter: it renames the
canonical weights, turns `transformers`' rotate-half q/k rows back into interleaved pairs, and declares
what the code fixes (Llama, tied, theta 10000).

    --model tests.adapters.llama2c_model:build

`build_traced` adds a trace: every stage as the model's code computes it, so q and k, before and after
RoPE, come per head in the code's interleaved order, which the factory declares (`rope_layout =
"interleaved"`). `build_traced_undeclared` is the same without the declaration (its trace breaks the
contract: the suite reads q/k in rotate-half order, and says what to declare). `build_traced_theta_500000`
and `build_traced_rotate_half_pairs` declare it and have a RoPE bug (theta 500000 where the config
says 10000; pairs (i, i + hd/2) of the interleaved rows rotated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from verifier import Constraints, ModelConfig, Unsupported

# ---- the model ------------------------------------------------------------------------------


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = None
    vocab_size: int = 32000
    hidden_dim: int | None = None
    multiple_of: int = 256
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    dropout: float = 0.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    angles = torch.outer(torch.arange(end).float(), freqs)  # [end, dim / 2]
    return torch.cos(angles), torch.sin(angles)


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, T, heads, hd]: pairs (2i, 2i + 1) rotated by cos/sin [T, hd / 2]."""
    x_r, x_i = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([x_r * cos - x_i * sin, x_r * sin + x_i * cos], dim=-1).flatten(3).type_as(x)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """[B, T, n_kv_heads, hd] -> [B, T, n_kv_heads * n_rep, hd]."""
    B, T, n_kv, hd = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(B, T, n_kv, n_rep, hd).reshape(B, T, n_kv * n_rep, hd)


class Attention(nn.Module):
    rotary = staticmethod(apply_rotary_emb)  # a seam for the adapter's RoPE-bug variants

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_local_heads, self.head_dim = args.n_heads, args.dim // args.n_heads
        self.n_rep = self.n_local_heads // self.n_kv_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = self.rotary(xq, cos, sin), self.rotary(xk, cos, sin)
        xk, xv = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)  # [B, heads, T, hd]
        scores = xq @ xk.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores + torch.full((1, 1, seqlen, seqlen), float("-inf")).triu(1)
        output = F.softmax(scores.float(), dim=-1).type_as(xq) @ xv
        return self.wo(output.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int | None, multiple_of: int) -> None:
        super().__init__()
        if hidden_dim is None:
            hidden_dim = int(2 * (4 * dim) / 3)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.tok_embeddings.weight = self.output.weight  # weight tying
        cos, sin = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h)[:, [-1], :])  # inference: the last position only


# ---- the adapter ----------------------------------------------------------------------------

RENAMES = {"model.embed_tokens": "tok_embeddings", "model.norm": "norm", "model.layers": "layers", "lm_head": "output",
           "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
           "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
           "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
           "post_attention_layernorm": "ffn_norm"}  # fmt: skip
SHAPES = Constraints(families=("llama",), tie_embeddings=True, rope_theta=10000.0, switches=())


def interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows of each head from rotate-half order to interleaved pairs (2i, 2i + 1)."""
    return w.reshape(n_heads, 2, -1, w.shape[1]).transpose(0, 2, 1, 3).reshape(w.shape)


class Llama2c:
    capabilities = frozenset({"last_logits"})

    def __init__(self, model: Transformer) -> None:
        self.model = model.eval()

    @torch.no_grad()
    def logits(self, tokens: np.ndarray) -> np.ndarray:
        out = self.model(torch.from_numpy(np.atleast_2d(tokens)))[:, 0]  # [B, V]
        return out.numpy() if np.ndim(tokens) == 2 else out[0].numpy()


class Llama2cTraced(Llama2c):
    """The model with a trace of one sequence, each stage as model.py's code holds it: q and k (before
    and after RoPE) per head in its interleaved order (which the factories declare)."""

    capabilities = frozenset({"last_logits", "trace"})

    @torch.no_grad()
    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        m = self.model
        T = len(tokens)
        cos, sin = m.freqs_cos[:T], m.freqs_sin[:T]
        h = m.tok_embeddings(torch.from_numpy(tokens)[None])  # [1, T, dim]
        found = {"embed": h}
        for i, layer in enumerate(m.layers):
            a, x = layer.attention, layer.attention_norm(h)
            q = a.wq(x).view(1, T, a.n_local_heads, a.head_dim)
            k = a.wk(x).view(1, T, a.n_kv_heads, a.head_dim)
            v = a.wv(x).view(1, T, a.n_kv_heads, a.head_dim)
            q_rope, k_rope = a.rotary(q, cos, sin), a.rotary(k, cos, sin)
            xq, xk, xv = (t.transpose(1, 2) for t in (q_rope, repeat_kv(k_rope, a.n_rep), repeat_kv(v, a.n_rep)))
            scores = xq @ xk.transpose(2, 3) / math.sqrt(a.head_dim)
            probs = F.softmax(scores + torch.full((T, T), float("-inf")).triu(1), dim=-1)
            attn = (probs @ xv).transpose(1, 2).reshape(1, T, -1)
            attn_out = a.wo(attn)
            resid = h + attn_out
            mlp_norm = layer.ffn_norm(resid)
            mlp_out = layer.feed_forward(mlp_norm)
            h = resid + mlp_out
            per_head = {"q": q, "k": k, "v": v, "q_rope": q_rope, "k_rope": k_rope}  # [1, T, heads, hd]
            found |= {f"layers.{i}.{op}": t.transpose(1, 2) for op, t in per_head.items()}
            ops = {"attn_norm": x, "scores": scores, "probs": probs, "attn": attn, "attn_out": attn_out,
                   "resid_attn": resid, "mlp_norm": mlp_norm, "mlp_out": mlp_out, "resid_mlp": h}  # fmt: skip
            found |= {f"layers.{i}.{op}": t for op, t in ops.items()}
        found |= {"final_norm": m.norm(h), "logits": m.output(m.norm(h))}
        return {name: t[0].numpy() for name, t in found.items()}


def rotate_half_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """A RoPE bug: pairs (i, i + hd / 2) of the interleaved rows rotated (reshaped [2, hd / 2], not [hd / 2, 2])."""
    x_r, x_i = x.float().reshape(*x.shape[:-1], 2, -1).unbind(-2)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x_r * cos - x_i * sin, x_r * sin + x_i * cos], dim=-1).type_as(x)


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> Llama2c:
    reason = SHAPES.refusal(config)
    if reason:
        raise Unsupported(f"llama2.c's model.py fixes these: {reason}")
    args = ModelArgs(config.d_model, config.n_layers, config.n_heads, config.n_kv_heads, config.vocab_size,
                     hidden_dim=config.d_ff, norm_eps=config.norm_eps, max_seq_len=config.n_ctx)  # fmt: skip
    state = {}
    for name, w in weights.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            w = interleaved(w, config.n_heads if "q_proj" in name else config.n_kv_heads)
        for theirs, ours in RENAMES.items():
            name = name.replace(theirs, ours)
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
    state["output.weight"] = state["tok_embeddings.weight"]
    model = Transformer(args)
    model.load_state_dict(state)
    return Llama2c(model)


def build_traced(config: ModelConfig, weights: dict[str, np.ndarray]) -> Llama2c:
    return Llama2cTraced(build(config, weights).model)


def build_traced_undeclared(config: ModelConfig, weights: dict[str, np.ndarray]) -> Llama2c:
    return Llama2cTraced(build(config, weights).model)


def build_traced_theta_500000(config: ModelConfig, weights: dict[str, np.ndarray]) -> Llama2c:
    model = build(config, weights).model
    model.freqs_cos, model.freqs_sin = precompute_freqs_cis(config.d_head, config.n_ctx, theta=500000.0)
    return Llama2cTraced(model)


def build_traced_rotate_half_pairs(config: ModelConfig, weights: dict[str, np.ndarray]) -> Llama2c:
    model = build(config, weights).model
    for layer in model.layers:
        layer.attention.rotary = rotate_half_pairs
    return Llama2cTraced(model)


build.constraints = build_traced_undeclared.constraints = SHAPES  # type: ignore[attr-defined]
for declared in (build_traced, build_traced_theta_500000, build_traced_rotate_half_pairs):
    declared.constraints = SHAPES  # type: ignore[attr-defined]
    declared.rope_layout = "interleaved"  # type: ignore[attr-defined]  # the order its trace holds q/k in
