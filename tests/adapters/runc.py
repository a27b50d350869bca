"""A Llama in the style of llama2.c's run.c, in NumPy: `forward(token, pos)` runs one token at a
position and returns that position's logits, keeping keys and values in a per-layer cache of
`seq_len` rows; RMSNorm's eps and RoPE's theta are hard-coded (1e-5, 10000); RoPE turns pairs
(2i, 2i + 1) of each head; the classifier is shared with the embedding or not, as the file says.

Its adapter is what an inference engine gives: the next token's logits for one sequence (the prompt
fed token by token), and a decode that continues a copy of the cache. It declares "last_logits",
"unbatched" and "decode", and the shapes it fixes.

    --model tests.adapters.runc:build
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from verifier import Constraints, ModelConfig, Unsupported

# ---- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int


@dataclass(frozen=True)
class Weights:
    token_embedding_table: np.ndarray  # [vocab_size, dim]
    rms_att_weight: np.ndarray  # [n_layers, dim]
    wq: np.ndarray  # [n_layers, dim, dim] (out, in)
    wk: np.ndarray  # [n_layers, kv_dim, dim]
    wv: np.ndarray  # [n_layers, kv_dim, dim]
    wo: np.ndarray  # [n_layers, dim, dim]
    rms_ffn_weight: np.ndarray  # [n_layers, dim]
    w1: np.ndarray  # [n_layers, hidden_dim, dim]
    w2: np.ndarray  # [n_layers, dim, hidden_dim]
    w3: np.ndarray  # [n_layers, hidden_dim, dim]
    rms_final_weight: np.ndarray  # [dim]
    wcls: np.ndarray  # [vocab_size, dim]


@dataclass(frozen=True)
class RunState:
    key_cache: np.ndarray  # [n_layers, seq_len, kv_dim]
    value_cache: np.ndarray
    pos: int = 0  # the next position


def rmsnorm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return weight * (x / np.sqrt(np.mean(x * x) + np.float32(1e-5)))


def softmax(x: np.ndarray) -> np.ndarray:
    """Over the first axis (the positions attended to)."""
    e = np.exp(x - x.max(0))
    return e / e.sum(0)


def forward(c: Config, w: Weights, s: RunState, token: int) -> np.ndarray:
    """Run `token` at position s.pos (writing its keys and values into s's cache): logits [vocab_size]."""
    head_size, pos = c.dim // c.n_heads, s.pos
    kv_mul = c.n_heads // c.n_kv_heads
    x = w.token_embedding_table[token].copy()
    freq = 1.0 / 10000.0 ** ((np.arange(0, c.dim, 2) % head_size) / head_size)  # per pair of q's dim entries
    cos, sin = np.cos(pos * freq).astype(np.float32), np.sin(pos * freq).astype(np.float32)
    for layer in range(c.n_layers):
        xb = rmsnorm(x, w.rms_att_weight[layer])
        q, k, v = w.wq[layer] @ xb, w.wk[layer] @ xb, w.wv[layer] @ xb
        for vec in (q, k):  # RoPE: rotate each pair (2i, 2i + 1) by pos * freq
            n = len(vec) // 2
            v0, v1 = vec[0::2].copy(), vec[1::2].copy()
            vec[0::2], vec[1::2] = v0 * cos[:n] - v1 * sin[:n], v0 * sin[:n] + v1 * cos[:n]
        s.key_cache[layer, pos], s.value_cache[layer, pos] = k, v
        # Attention of every head at once: query head h reads kv head h // kv_mul.
        keys = s.key_cache[layer, : pos + 1].reshape(pos + 1, c.n_kv_heads, 1, head_size)
        values = s.value_cache[layer, : pos + 1].reshape(pos + 1, c.n_kv_heads, 1, head_size)
        q_heads = q.reshape(c.n_kv_heads, kv_mul, head_size)
        att = softmax((keys * q_heads).sum(-1) / np.float32(np.sqrt(head_size)))  # [pos + 1, n_kv_heads, kv_mul]
        x = x + w.wo[layer] @ (att[..., None] * values).sum(0).reshape(c.dim)
        xb = rmsnorm(x, w.rms_ffn_weight[layer])
        hb = w.w1[layer] @ xb
        hb = hb * (1.0 / (1.0 + np.exp(-hb))) * (w.w3[layer] @ xb)  # SwiGLU
        x = x + w.w2[layer] @ hb
    return w.wcls @ rmsnorm(x, w.rms_final_weight)


# ---- the adapter ----------------------------------------------------------------------------

SHAPES = Constraints(families=("llama",), norm_eps=1e-5, rope_theta=10000.0, switches=())


def interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k rows of each head from rotate-half order to interleaved pairs (2i, 2i + 1)."""
    return w.reshape(n_heads, 2, -1, w.shape[1]).transpose(0, 2, 1, 3).reshape(w.shape)


class RunC:
    capabilities = frozenset({"last_logits", "unbatched", "decode"})

    def __init__(self, config: Config, weights: Weights) -> None:
        self.config, self.weights = config, weights

    def _empty(self) -> RunState:
        kv_dim = self.config.dim * self.config.n_kv_heads // self.config.n_heads
        shape = (self.config.n_layers, self.config.seq_len, kv_dim)
        return RunState(np.zeros(shape, np.float32), np.zeros(shape, np.float32))

    def decode(self, tokens: np.ndarray, cache: RunState | None = None) -> tuple[np.ndarray, RunState]:
        s = self._empty() if cache is None else replace(cache, key_cache=cache.key_cache.copy(),
                                                        value_cache=cache.value_cache.copy())  # fmt: skip
        for token in tokens:
            logits = forward(self.config, self.weights, s, int(token))
            s = replace(s, pos=s.pos + 1)
        return logits, s

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.decode(tokens)[0]


def build(config: ModelConfig, weights: dict[str, np.ndarray]) -> RunC:
    reason = SHAPES.refusal(config)
    if reason:
        raise Unsupported(f"run.c hard-codes these: {reason}")

    def stacked(name: str, transform=lambda w: w) -> np.ndarray:  # type: ignore[no-untyped-def]
        return np.stack([transform(weights[f"model.layers.{i}.{name}.weight"]) for i in range(config.n_layers)])

    embedding = weights["model.embed_tokens.weight"]
    w = Weights(
        token_embedding_table=embedding,
        rms_att_weight=stacked("input_layernorm"),
        wq=stacked("self_attn.q_proj", lambda w: interleaved(w, config.n_heads)),
        wk=stacked("self_attn.k_proj", lambda w: interleaved(w, config.n_kv_heads)),
        wv=stacked("self_attn.v_proj"),
        wo=stacked("self_attn.o_proj"),
        rms_ffn_weight=stacked("post_attention_layernorm"),
        w1=stacked("mlp.gate_proj"),
        w2=stacked("mlp.down_proj"),
        w3=stacked("mlp.up_proj"),
        rms_final_weight=weights["model.norm.weight"],
        wcls=embedding if config.tie_embeddings else weights["lm_head.weight"],
    )
    c = Config(config.d_model, config.d_ff, config.n_layers, config.n_heads, config.n_kv_heads, config.vocab_size,
               config.n_ctx)  # fmt: skip
    return RunC(c, w)


build.constraints = SHAPES  # type: ignore[attr-defined]
