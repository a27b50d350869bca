"""The layers of GPT-2 and the Llama-layout families, one function each, written from the math in NumPy.

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


def rms_norm_plus_one(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    """Gemma's RMSNorm, [..., d] -> [..., d]: x / sqrt(mean(x^2) + eps) * (1 + gain).

    The gain is stored as an offset from 1 (a zero gain is the identity scale). `transformers`
    computes it in float32 and rounds the product once; the caller's dtype is float32 for a
    float32 or narrower model, float64 for the oracle.
    """
    return x / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps) * (1 + gain)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    c = np.sqrt(2.0 / np.pi).astype(x.dtype)
    # In place on one temporary, in the formula's order of operations (the same bits as written out):
    # the MLP's [B, T, d_ff] is the widest activation of a layer.
    t = 0.044715 * x
    t *= x
    t *= x
    t += x
    t *= c
    np.tanh(t, out=t)
    t += 1.0
    t *= 0.5 * x
    return t


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), with sigmoid(x) = (1 + tanh(x / 2)) / 2, which cannot overflow."""
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Gemma 2's soft cap, cap * tanh(x / cap): close to x for |x| << cap, always within (-cap, cap)."""
    cap_ = np.asarray(cap, dtype=x.dtype)
    return cap_ * np.tanh(x / cap_)


def softmax(x: np.ndarray, axis: int = -1, out: np.ndarray | None = None) -> np.ndarray:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max so that exp cannot overflow; into `out`
    (which may be `x`) where given.

    Rows that are -inf everywhere (a query that may attend to nothing) are not expected.
    """
    e = np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
    np.exp(e, out=e)  # in place: attention's [B, h, T, S] arrays are the largest of the pass
    e /= e.sum(axis=axis, keepdims=True)
    return e


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """[..., d_in] @ [d_in, d_out] (+ [d_out]) -> [..., d_out].

    The leading axes are flattened into one matrix product, which reads `w` once for the whole
    batch (a [B, T, d_in] product would read it B times: the cost of a full-size layer).
    """
    y = (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1])
    if b is not None:
        y += b  # in place: the product is a new array
    return y


def rope_frequencies(d_head: int, theta: float) -> np.ndarray:
    """RoPE's inverse frequencies theta^(-2i/d_head) for i < d_head / 2, in float64: [d_head/2]."""
    return theta ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)


def linear_scaled_frequencies(inv_freq: np.ndarray, factor: float) -> np.ndarray:
    """Linear RoPE scaling: every inverse frequency divided by `factor` (positions compressed by it)."""
    return inv_freq / factor


def llama3_scaled_frequencies(
    inv_freq: np.ndarray, factor: float, low_freq_factor: float, high_freq_factor: float, original_n_ctx: int
) -> np.ndarray:
    """Llama 3.1's RoPE scaling of inverse frequencies [d_head/2], by wavelength 2 pi / inv_freq:
    shorter than original_n_ctx / high_freq_factor kept (they turn many times within the trained
    context), longer than original_n_ctx / low_freq_factor divided by `factor`, and in between
    a mix of the two whose weight on the kept frequency, (original_n_ctx / wavelength - low) /
    (high - low), runs from 0 at the long end to 1 at the short end."""
    wavelength = 2 * np.pi / inv_freq
    kept = (original_n_ctx / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = (1 - kept) * inv_freq / factor + kept * inv_freq
    scaled = np.where(wavelength > original_n_ctx / low_freq_factor, inv_freq / factor, mixed)
    return np.where(wavelength < original_n_ctx / high_freq_factor, inv_freq, scaled)


def rope_tables(
    positions: np.ndarray, d_head: int, theta: float, inv_freq: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of pos * inv_freq: [..., T] -> 2 x [..., T, d_head/2]; inv_freq defaults to
    `rope_frequencies(d_head, theta)` (unscaled).

    Computed in float64 whatever the model's dtype: the angles reach n_ctx radians, where
    float32 rounding of the angle alone would cost more than a float32 model's whole budget.
    """
    if inv_freq is None:
        inv_freq = rope_frequencies(d_head, theta)
    angles = positions[..., None].astype(np.float64) * inv_freq  # [..., T, d_head/2]
    return np.cos(angles), np.sin(angles)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + r/2) of each head vector (rotate-half layout), r = x's last axis.

    x: [B, heads, T, r]; cos, sin: [B, T, r/2], in x's dtype -> [B, heads, T, r].
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, r/2]: the same rotation for every head
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def apply_rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (2i, 2i + 1) of each head vector by angle i (GLM), r = x's last axis.

    x: [B, heads, T, r]; cos, sin: [B, T, r/2], in x's dtype -> [B, heads, T, r].
    """
    even, odd = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None], sin[:, None]
    return np.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)


def partial_rope(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotate: Callable[..., np.ndarray] = apply_rope
) -> np.ndarray:
    """RoPE on each head's first r = 2 cos.shape[-1] dims by `rotate`; the other d_head - r dims pass.

    x: [B, heads, T, d_head]; cos, sin: [B, T, r/2] -> [B, heads, T, d_head] (the head's own order).
    """
    r = 2 * cos.shape[-1]
    if r == x.shape[-1]:
        return rotate(x, cos, sin)
    return np.concatenate([rotate(x[..., :r], cos, sin), x[..., r:]], axis=-1)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """[B, T, n_heads * d_head] -> [B, n_heads, T, d_head]."""
    B, T, _ = x.shape
    return x.reshape(B, T, n_heads, -1).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, n_heads, T, d_head] -> [B, T, n_heads * d_head]."""
    B, n_heads, T, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, n_heads * d_head)


def attention_scores(q: np.ndarray, k: np.ndarray, scale: float | None = None) -> np.ndarray:
    """Scaled dot products q k^T * scale, scale 1/sqrt(d_head) unless given:
    [..., T, d_head], [..., S, d_head] -> [..., T, S]."""
    scores = q @ k.swapaxes(-1, -2)  # [..., T, S], the largest array of a layer: scaled in place
    if scale is None:  # divided, as ever: the float32 bits of GPT-2 and Llama stay what they were
        scores /= np.sqrt(q.shape[-1]).astype(q.dtype)
    else:
        scores *= np.asarray(scale, dtype=q.dtype)
    return scores


def causal_mask(T: int, S: int, window: int | None = None) -> np.ndarray:
    """[T, S] bool, True where the query at position p = S - T + t may see key position s: s <= p,
    and with a sliding `window` W also p - W < s (the query and the W - 1 keys before it)."""
    p, s = np.arange(S - T, S)[:, None], np.arange(S)[None, :]
    allowed = s <= p
    return allowed if window is None else allowed & (s > p - window)


# Queries per block of an unwatched attention: at 128 each block's products stay large enough for the
# BLAS to run at speed, and a causal prefill of 1,024 positions skips 7/16 of the score work (3/8 at
# 256; GPT-2's whole pass at T = 1,024 here, the fastest of 4 alternated: float64 7.63 s against 7.91 s
# at 256, float32 4.05 s against 4.06 s).
QUERY_BLOCK = 128


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    allowed: np.ndarray,
    stage: Callable[[str, np.ndarray], np.ndarray] | None = None,
    *,
    scale: float | None = None,
    cap: float | None = None,
) -> np.ndarray:
    """Masked softmax attention with grouped-query heads: q [B, h, T, d_head], k and v [B, kv, S, d_head]
    -> [B, h, T, d_head].

    Query head j reads key/value head j // (h / kv): q is viewed as [B, kv, h / kv, T, d_head] so that
    each group of query heads meets its key/value head by broadcasting. `allowed` (bool, broadcastable
    to [B, h, T, S]) says which keys each query sees. The scores are q k^T * `scale` (1/sqrt(d_head)
    unless given), soft-capped at `cap` where given, before the mask (as Gemma 2 does).
    `stage(op, x)`, where given, receives "scores" and "probs" [B, h, T, S] and returns what attention
    goes on with. Without one nothing watches them, and the queries are taken QUERY_BLOCK at a time,
    each block against the span of keys it sees (a causal block skips the keys after its last query):
    the same sums without their masked terms.
    """
    B, h, T, d_head = q.shape
    kv, S = k.shape[1], k.shape[2]
    grouped = q.reshape(B, kv, h // kv, T, d_head)
    keys, values = k[:, :, None], v[:, :, None]  # [B, kv, 1, S, d_head]
    mask = allowed.reshape(allowed.shape[0], -1, 1, T, S)
    if stage is not None:

        def watched(op: str, x: np.ndarray) -> np.ndarray:
            return stage(op, x.reshape(B, h, T, S)).reshape(x.shape)

        return _attend(grouped, keys, values, mask, watched, scale, cap).reshape(B, h, T, d_head)
    out = np.empty_like(grouped)
    for t0 in range(0, T, QUERY_BLOCK):
        rows = slice(t0, t0 + QUERY_BLOCK)
        seen = np.flatnonzero(mask[..., rows, :].any(axis=(0, 1, 2, 3)))  # every query sees itself at least
        cols = slice(seen[0], seen[-1] + 1)
        block = grouped[..., rows, :], keys[..., cols, :], values[..., cols, :], mask[..., rows, cols]
        out[..., rows, :] = _attend(*block, None, scale, cap)
    return out.reshape(B, h, T, d_head)


def _attend(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    watch: Callable[[str, np.ndarray], np.ndarray] | None,
    scale: float | None,
    cap: float | None,
) -> np.ndarray:
    """Attention of grouped queries [B, kv, g, t, d_head] over keys and values [B, kv, 1, s, d_head],
    `mask` broadcastable to the scores [B, kv, g, t, s], each stage passed through `watch` where given."""
    scores = attention_scores(q, k, scale)
    if cap is not None:
        scores = softcap(scores, cap)
    if watch is None:  # nothing keeps the scores: masked in place, not copied (the largest array of a layer)
        np.copyto(scores, -np.inf, where=~mask)
        return softmax(scores, out=scores) @ v
    scores = watch("scores", scores)
    probs = np.where(mask, scores, -np.inf)  # a new array: the trace may keep `scores`
    return watch("probs", softmax(probs, out=probs)) @ v


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), as (1 + tanh(x / 2)) / 2, which cannot overflow."""
    return 0.5 + 0.5 * np.tanh(0.5 * x)


def router_probs(h: np.ndarray, router: np.ndarray) -> np.ndarray:
    """A MoE router's probabilities over experts: softmax(h W_r^T) along the expert axis.

    h: [..., d_model]; router: [n_experts, d_model] -> [..., n_experts].
    """
    return softmax(linear(h, router.T), axis=-1)


def top_k_experts(probs: np.ndarray, k: int) -> np.ndarray:
    """The k most probable experts of each token, most probable first: [..., n_experts] -> int [..., k].

    A stable sort: of equal probabilities the lower index comes first (as `torch.topk` on CPU).
    """
    return np.argsort(-probs, axis=-1, kind="stable")[..., :k]


def renormalise(weights: np.ndarray) -> np.ndarray:
    """The chosen experts' probabilities scaled to sum 1 over the last axis: [..., k] -> [..., k]."""
    return weights / weights.sum(axis=-1, keepdims=True)


def sigmoid_gated(out: np.ndarray, h: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """Qwen2-MoE's shared-expert gate: out * sigmoid(h w_s^T). out, h: [N, d]; gate: [1, d_model] -> [N, d]."""
    return out * sigmoid(linear(h, gate.T))
