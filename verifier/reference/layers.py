"""The layers of GPT-2 and Llama, one function each, written from the math in NumPy.

Shapes: B batch, T new positions, S positions attended to (cache + new), `h` query heads,
`kv` key/value heads. Any leading batch axes are carried through unchanged. Functions compute in
the dtype of their inputs: float32 to mirror the models under test, float64 as the oracle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def lookup(table: np.ndarray, ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Rows of an embedding table [N, d] at integer ids [...] -> [..., d], converted to `dtype`
    (after indexing: a memory-mapped table is read only where the ids point)."""
    return np.asarray(table[ids], dtype=dtype)


def layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """[..., d] -> [..., d]: (x - mean) / sqrt(var + eps) * gain + bias, biased variance."""
    mean = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gain + bias


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    """[..., d] -> [..., d]: x / sqrt(mean(x^2) + eps) * gain."""
    return x / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps) * gain


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    c = np.sqrt(2.0 / np.pi).astype(x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), with sigmoid(x) = (1 + tanh(x / 2)) / 2, which cannot overflow."""
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max so that exp cannot overflow.

    Rows that are -inf everywhere (a query that may attend to nothing) are not expected.
    """
    e = x - x.max(axis=axis, keepdims=True)
    np.exp(e, out=e)  # in place: attention's [B, h, T, S] arrays are the largest of the pass
    e /= e.sum(axis=axis, keepdims=True)
    return e


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """[..., d_in] @ [d_in, d_out] (+ [d_out]) -> [..., d_out].

    The leading axes are flattened into one matrix product, which reads `w` once for the whole
    batch (a [B, T, d_in] product would read it B times: the cost of a full-size layer).
    """
    y = (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1])
    return y if b is None else y + b


def rope_tables(positions: np.ndarray, d_head: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of pos * theta^(-2i/d_head) for i < d_head / 2: [..., T] -> 2 x [..., T, d_head/2].

    Computed in float64 whatever the model's dtype: the angles reach n_ctx radians, where
    float32 rounding of the angle alone would cost more than a float32 model's whole budget.
    """
    inv_freq = theta ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # [d_head/2]
    angles = positions[..., None].astype(np.float64) * inv_freq  # [..., T, d_head/2]
    return np.cos(angles), np.sin(angles)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + d_head/2) of each head vector (rotate-half layout).

    x: [B, heads, T, d_head]; cos, sin: [B, T, d_head/2], in x's dtype -> [B, heads, T, d_head].
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, d_head/2]: the same rotation for every head
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """[B, T, n_heads * d_head] -> [B, n_heads, T, d_head]."""
    B, T, _ = x.shape
    return x.reshape(B, T, n_heads, -1).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, n_heads, T, d_head] -> [B, T, n_heads * d_head]."""
    B, n_heads, T, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, n_heads * d_head)


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Scaled dot products q k^T / sqrt(d_head): [..., T, d_head], [..., S, d_head] -> [..., T, S]."""
    return q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]).astype(q.dtype)


def causal_mask(T: int, S: int) -> np.ndarray:
    """[T, S] bool, True where the query at position S - T + t may see key position s (s <= its own)."""
    return np.arange(S)[None, :] <= np.arange(S - T, S)[:, None]


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    allowed: np.ndarray,
    stage: Callable[[str, np.ndarray], np.ndarray] = lambda op, x: x,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masked softmax attention with grouped-query heads.

    q: [B, h, T, d_head]; k, v: [B, kv, S, d_head]; allowed: bool, broadcastable to [B, h, T, S].
    Query head j reads key/value head j // (h / kv): q is viewed as [B, kv, h / kv, T, d_head] so that
    each group of query heads meets its key/value head by broadcasting. `stage(op, x)` receives
    "scores" and "probs" [B, h, T, S] and returns what attention goes on with. Returns
    (out [B, h, T, d_head], scores [B, h, T, S], probs [B, h, T, S]).
    """
    B, h, T, d_head = q.shape
    kv, S = k.shape[1], k.shape[2]
    grouped = q.reshape(B, kv, h // kv, T, d_head)
    scores = attention_scores(grouped, k[:, :, None])  # [B, kv, h / kv, T, S]
    scores = stage("scores", scores.reshape(B, h, T, S)).reshape(B, kv, h // kv, T, S)
    probs = softmax(np.where(allowed.reshape(allowed.shape[0], -1, 1, T, S), scores, -np.inf))
    probs = stage("probs", probs.reshape(B, h, T, S)).reshape(B, kv, h // kv, T, S)
    out = probs @ v[:, :, None]  # [B, kv, h / kv, T, d_head]
    return out.reshape(B, h, T, d_head), scores.reshape(B, h, T, S), probs.reshape(B, h, T, S)
