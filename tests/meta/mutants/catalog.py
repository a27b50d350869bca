"""The mutant catalog: one realistic bug each, all seen in real projects.

Every class overrides one step of the correct `base.Transformer`. `mutants.<ClassName>` is its
factory, plugged in exactly as a user's: `--model tests.meta.mutants.catalog:mutants.ScaleByDHead`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from tests.meta.mutants.base import Transformer, factory

# ---- attention scaling and softmax ---------------------------------------------------------------


class ScaleByDHead(Transformer):
    """Attention scores divided by d_head instead of sqrt(d_head)."""

    def scale(self) -> float:
        return 1 / self.c.d_head


class ScaleByDModel(Transformer):
    """Attention scores divided by sqrt(d_model) instead of sqrt(d_head)."""

    def scale(self) -> float:
        return 1 / math.sqrt(self.c.d_model)


class NoScale(Transformer):
    """Attention scores not scaled at all."""

    def scale(self) -> float:
        return 1.0


class SoftmaxWrongAxis(Transformer):
    """Attention softmax over the query axis instead of the key axis."""

    def attend(self, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        x = np.where(allowed, scores, -np.inf)
        e = np.exp(x - x.max(-2, keepdims=True))
        return e / e.sum(-2, keepdims=True)


class SoftmaxNoMaxShift(Transformer):
    """Softmax as exp(x) / sum(exp(x)) without subtracting the max: overflows at large logits."""

    def softmax(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)
            return e / e.sum(-1, keepdims=True)


# ---- the causal mask ------------------------------------------------------------------------------


class MaskMissing(Transformer):
    """No causal mask: every position attends to the future too."""

    def allowed(self, T: int, S: int) -> np.ndarray:
        return np.ones((T, S), dtype=bool)


class MaskExcludesDiagonal(Transformer):
    """Causal mask shifted by one: a position cannot attend to itself (the first one attends to a
    -1e9-filled row, as implementations with a finite fill value do)."""

    def allowed(self, T: int, S: int) -> np.ndarray:
        return np.arange(S)[None, :] < np.arange(S - T, S)[:, None]

    def attend(self, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return self.softmax(np.where(allowed, scores, np.float32(-1e9)))


class MaskOneFutureToken(Transformer):
    """Causal mask shifted by one the other way: each position sees one token ahead."""

    def allowed(self, T: int, S: int) -> np.ndarray:
        return np.arange(S)[None, :] <= np.arange(S - T, S)[:, None] + 1


class MaskAfterSoftmax(Transformer):
    """Mask applied after the softmax: future weights zeroed, rows no longer sum to 1."""

    def attend(self, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return np.where(allowed, self.softmax(scores), 0)


# ---- norms ----------------------------------------------------------------------------------------


class LayerNormUnbiasedVariance(Transformer):
    """LayerNorm with the unbiased variance (divides by d_model - 1), as torch.var defaults to."""

    def layer_norm(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        var = x.var(-1, keepdims=True, ddof=1)
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(var + self.c.norm_eps) * gain + bias


class LayerNormEpsOutsideSqrt(Transformer):
    """LayerNorm as (x - mean) / (sqrt(var) + eps)."""

    def layer_norm(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        std = np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True))
        return (x - mean) / (std + self.c.norm_eps) * gain + bias


class RMSNormSumNoEps(Transformer):
    """RMSNorm as x / sqrt(sum x^2): no mean, no eps (the formula printed in a source article)."""

    def rms_norm(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).sum(-1, keepdims=True)) * gain


class NormEpsTooSmall(Transformer):
    """Norm eps 1e-6 where the config says 1e-5 (HF Llama's default instead of llama2.c's)."""

    def rms_norm(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * gain

    def layer_norm(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-6) * gain + bias


# ---- activations and the MLP ----------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


class GeluExactErf(Transformer):
    """GPT-2 with the exact erf GELU where GPT-2 uses the tanh approximation."""

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(np.float32)


class SwiGLUAsSum(Transformer):
    """SwiGLU written as w2(w1 x + w3 x) (as printed in a source article)."""

    def mlp(self, h: np.ndarray, i: int) -> np.ndarray:
        if self.gpt2:
            return super().mlp(h, i)
        p = f"model.layers.{i}.mlp."
        return self.linear(self.linear(h, p + "gate_proj") + self.linear(h, p + "up_proj"), p + "down_proj")


class SiluOnWrongBranch(Transformer):
    """SwiGLU with SiLU on the up projection instead of the gate: w2(w1 x * silu(w3 x))."""

    def mlp(self, h: np.ndarray, i: int) -> np.ndarray:
        if self.gpt2:
            return super().mlp(h, i)
        p = f"model.layers.{i}.mlp."
        act = self.linear(h, p + "gate_proj") * self.silu(self.linear(h, p + "up_proj"))
        return self.linear(act, p + "down_proj")


# ---- the residual stream and the classifier -------------------------------------------------------


class AttentionResidualDropped(Transformer):
    """The residual connection around attention dropped: x = attn(norm(x))."""

    def residual(self, x: np.ndarray, branch: np.ndarray, which: str) -> np.ndarray:
        return branch if which == "attn" else x + branch


class PostNorm(Transformer):
    """Post-norm blocks (x = norm(x + f(x)), the original Transformer) instead of pre-norm."""

    def block(self, x, i, positions, past, mask):
        attn_norm, mlp_norm = self.norm_names(i)
        x = self.stage(f"layers.{i}.attn_norm", x)  # what attention reads: x itself, not norm(x)
        a, kv = self.attention(x, i, positions, past, mask)
        a = self.stage(f"layers.{i}.attn_out", a)
        x = self.stage(f"layers.{i}.resid_attn", self.norm(x + a, attn_norm))
        x = self.stage(f"layers.{i}.mlp_norm", x)
        m = self.stage(f"layers.{i}.mlp_out", self.mlp(x, i))
        x = self.stage(f"layers.{i}.resid_mlp", self.norm(x + m, mlp_norm))
        return x, kv


class FinalNormMissing(Transformer):
    """The final norm (ln_f / model.norm) left out before the classifier."""

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return x


class ClassifierNotTied(Transformer):
    """A tied classifier left at its own random initialisation (loaded with strict=False)."""

    def classifier(self) -> np.ndarray:
        if not self.c.tie_embeddings:
            return super().classifier()
        rng = np.random.default_rng(0)
        return (0.02 * rng.standard_normal((self.c.vocab_size, self.c.d_model))).astype(np.float32)


class PositionEmbeddingMissing(Transformer):
    """GPT-2 without its learned position embedding."""

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.gpt2:
            return self.w["transformer.wte.weight"][tokens]
        return super().embed(tokens, positions)


class PositionEmbeddingOffset(Transformer):
    """GPT-2 reading the position embedding one row late (positions counted from 1)."""

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.gpt2:
            rows = np.minimum(positions + 1, self.c.n_ctx - 1)
            return self.w["transformer.wte.weight"][tokens] + self.w["transformer.wpe.weight"][rows]
        return super().embed(tokens, positions)


# ---- RoPE -----------------------------------------------------------------------------------------


class RopeInterleavedOnRotateHalf(Transformer):
    """RoPE rotating adjacent pairs (2j, 2j+1), llama2.c's layout, on HF rotate-half weights."""

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        angles = positions[:, None, :, None] * self.inv_freq()
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
        return out


class RopeTheta1000(Transformer):
    """RoPE base theta 1,000 instead of the config's 10,000."""

    def inv_freq(self) -> np.ndarray:
        d = self.c.d_head
        return 1000.0 ** (-np.arange(0, d, 2) / d)


class RopePositionsFromOne(Transformer):
    """RoPE positions counted from 1 (invisible in logits: only the trace shows it)."""

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return super().rope(x, positions + 1)


class RopeFrequenciesOverDModel(Transformer):
    """RoPE frequencies theta^(-2i/d_model) instead of theta^(-2i/d_head)."""

    def inv_freq(self) -> np.ndarray:
        return self.c.rope_theta ** (-np.arange(0, self.c.d_head, 2) / self.c.d_model)


class RopeOnValues(Transformer):
    """RoPE applied to v as well as q and k."""

    def rope_qkv(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray):
        return self.rope(q, positions), self.rope(k, positions), self.rope(v, positions)


class RopeMissingOnK(Transformer):
    """RoPE applied to q only."""

    def rope_qkv(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray):
        return self.rope(q, positions), k, v


# ---- the KV cache ---------------------------------------------------------------------------------


class CachePositionNotAdvanced(Transformer):
    """Decoding numbers the new chunk's positions from 0 whatever the cache holds."""

    def positions(self, B: int, T: int, past: int, mask: np.ndarray | None) -> np.ndarray:
        return super().positions(B, T, 0, mask)


class CacheChunkAppendedTwice(Transformer):
    """Each decoded chunk's keys and values are appended to the cache twice."""

    def append(self, past, k: np.ndarray, v: np.ndarray):
        if past is None:
            return k, v
        return super().append(super().append(past, k, v), k, v)


class CacheStaleReuse(Transformer):
    """The model keeps its own cache and ignores the one passed in, so an old cache is not reusable."""

    _own: tuple | None = None

    def decode(self, tokens: np.ndarray, cache=None):
        out, new_cache = super().decode(tokens, self._own if cache is not None else None)
        self._own = new_cache
        return out, new_cache


class CacheChunkMaskNotOffset(Transformer):
    """A chunk of several tokens decoded after a cache is masked as if it were a prefill: its i-th
    token sees the first i + 1 keys of the cache instead of the cache and the chunk's first i + 1
    (Meta's `torch.triu(mask, diagonal=1)` built without the `start_pos` offset). A full pass
    (nothing cached) and single steps (no mask needed) are right."""

    def allowed(self, T: int, S: int) -> np.ndarray:
        if T == 1:
            return np.ones((1, S), dtype=bool)
        return np.arange(S)[None, :] <= np.arange(T)[:, None]


class CacheKeptInModel(Transformer):
    """The keys and values live in buffers the model preallocates, and the cache it hands back is a
    view of them, so another sequence's prefill overwrites a cache kept for later (Meta's Llama:
    `self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk`). Each sequence decoded on its own,
    or restarted before its cache is used again, is right."""

    max_batch = 8

    def __init__(self, config, weights, precision: str = "float32") -> None:
        super().__init__(config, weights, precision)
        shape = (config.n_layers, self.max_batch, config.n_kv_heads, config.n_ctx, config.d_head)
        self.cache_k, self.cache_v = np.zeros(shape, np.float32), np.zeros(shape, np.float32)

    def decode(self, tokens: np.ndarray, cache=None):
        out, new_cache = super().decode(tokens, cache)
        bsz, start_pos, end = np.atleast_2d(tokens).shape[0], self.past_length(cache), self.past_length(new_cache)
        views = []
        for i, (k, v) in enumerate(new_cache):
            self.cache_k[i, :bsz, :, start_pos:end] = k[:, :, start_pos:]
            self.cache_v[i, :bsz, :, start_pos:end] = v[:, :, start_pos:]
            views.append((self.cache_k[i, :bsz, :, :end], self.cache_v[i, :bsz, :, :end]))
        return out, tuple(views)


class CacheOwnKeyMissing(Transformer):
    """In a decode step, the new tokens attend to the cached keys but not to their own."""

    def attended(self, past, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (k, v) if past is None else past


# ---- grouped-query attention, weight layouts ------------------------------------------------------


class GQAModuloMapping(Transformer):
    """Query head j reads kv head j % n_kv_heads instead of j // (n_heads / n_kv_heads)."""

    def kv_for_head(self, k: np.ndarray) -> np.ndarray:
        return np.tile(k, (1, self.c.n_heads // self.c.n_kv_heads, 1, 1))


class OutputProjectionTransposed(Transformer):
    """Llama's square o_proj used transposed, x @ W instead of x @ W.T (invisible to shape checks)."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if name.endswith("o_proj"):
            return x @ self.w[name + ".weight"]
        return super().linear(x, name)


class Conv1DNotTransposed(Transformer):
    """GPT-2's square Conv1D c_proj read as an nn.Linear [d_out, d_in] weight (invisible to shape checks)."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if name.endswith("attn.c_proj"):
            return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]
        return super().linear(x, name)


class QKVSplitOrder(Transformer):
    """GPT-2's fused c_attn split as (k, q, v) instead of (q, k, v)."""

    def qkv(self, h: np.ndarray, i: int):
        q, k, v = super().qkv(h, i)
        return (k, q, v) if self.gpt2 else (q, k, v)


# ---- generation and precision ---------------------------------------------------------------------


class GreedyFromFirstRow(Transformer):
    """Generation takes the next token from the first row of the logits instead of the last."""

    def next_token(self, logits: np.ndarray) -> int:
        return int(np.argmax(logits[0]))


class Float16Accumulation(Transformer):
    """Matrix products accumulated in float16."""

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return (a.astype(np.float16) @ b.astype(np.float16)).astype(np.float32)

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        w = self.w[name + ".weight"]
        w = w if self.gpt2 else w.T
        y = self.matmul(x, w)
        return y + self.w[name + ".bias"] if self.gpt2 else y


# ---- batches, long sequences, state between calls, the trace ---------------------------------------


class RMSNormOverBatch(Transformer):
    """RMSNorm whose mean square runs over the batch axis too (a reduction over the wrong axes)."""

    def rms_norm(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(axis=(0, -1), keepdims=True) + self.c.norm_eps) * gain


class MaskOnlyDiagonal(Transformer):
    """An identity matrix used as the causal mask: each position attends to itself only."""

    def allowed(self, T: int, S: int) -> np.ndarray:
        return np.arange(S)[None, :] == np.arange(S - T, S)[:, None]


class AttentionMaskIgnored(Transformer):
    """`logits` accepts an attention mask but never uses it: left padding leaks into real tokens."""

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        return super().logits(tokens)


class StateLeaksBetweenCalls(Transformer):
    """A buffer kept across calls: each call's logits move a little from the last call's."""

    calls = 0

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        self.calls += 1
        return super().logits(tokens, attention_mask) + np.float32(1e-3) * (self.calls - 1)


class PositionTableTruncated(Transformer):
    """GPT-2's position table cut to its first 128 rows (a loader that slices wpe): later positions
    all read row 127, so the bug shows only on sequences longer than 128 tokens."""

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return super().embed(tokens, np.minimum(positions, 127) if self.gpt2 else positions)


class TraceHeadsAxisSwapped(Transformer):
    """A correct model whose trace reports q as [T, n_heads, d_head] instead of [n_heads, T, d_head]."""

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        return {s: a.transpose(1, 0, 2) if s.endswith(".q") else a for s, a in super().trace(tokens).items()}


# ---- what the families of issue 26 add ----------------------------------------------------------


class WindowOffByOne(Transformer):
    """A sliding window one key too wide: the query at t sees keys t - W .. t (W + 1 keys), where
    `transformers` (and Mistral's reference) see t - W + 1 .. t."""

    def in_window(self, T: int, S: int, W: int, past: object) -> np.ndarray:
        return np.arange(S)[None, :] >= np.arange(S - T, S)[:, None] - W


class WindowOneKeyShort(Transformer):
    """A sliding window one key too narrow: the query at t sees keys t - W + 2 .. t (W - 1 keys), a
    `<` where the mask needs `<=`."""

    def in_window(self, T: int, S: int, W: int, past: object) -> np.ndarray:
        return np.arange(S)[None, :] > np.arange(S - T, S)[:, None] - W + 1


class WindowIgnoredWhileDecoding(Transformer):
    """The sliding window applied to a full pass but not after a cache: a decoded token attends to
    every cached key (a rolling-buffer cache whose mask is built only for the prefill)."""

    def in_window(self, T: int, S: int, W: int, past: object) -> np.ndarray:
        return super().in_window(T, S, W, past) if past is None else np.ones((T, S), dtype=bool)


class LayerTypesSwapped(Transformer):
    """Local/global alternation swapped: the layers `layer_types` calls full slide and the sliding
    ones see every key (every layer of a model whose layers all slide sees every key)."""

    def window(self, i: int) -> int | None:
        return self.c.sliding_window if self.c.window(i) is None else None


class RopeScalingOnEveryBand(Transformer):
    """Llama 3's RoPE scaling applied to every frequency (all divided by the factor), not only to
    wavelengths longer than original_n_ctx / low_freq_factor (the same as "linear" scaling, where
    it is right)."""

    def scaled(self, inv_freq: np.ndarray) -> np.ndarray:
        s = self.c.rope_scaling
        return inv_freq if s is None else inv_freq / s.factor


class KeyBiasDropped(Transformer):
    """The key projection's bias left out (a loader that maps only q_proj.bias and v_proj.bias)."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if name.endswith("k_proj"):
            return x @ self.w[name + ".weight"].T
        return super().linear(x, name)


class ValueBiasDropped(Transformer):
    """The value projection's bias left out."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if name.endswith("v_proj"):
            return x @ self.w[name + ".weight"].T
        return super().linear(x, name)


class OutputBiasAdded(Transformer):
    """An output projection with a bias where the family has none (Qwen2's o_proj built with
    bias=True like q/k/v, the bias left at its random initialisation by a strict=False load)."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = super().linear(x, name)
        if name.endswith("o_proj") and self.c.qkv_bias and not self.c.o_bias:
            rng = np.random.default_rng(0)
            y = y + (0.02 * rng.standard_normal(self.c.d_model)).astype(self.dtype)
        return y


class QKNormAfterRope(Transformer):
    """Qwen3's q/k RMSNorm applied after RoPE instead of before (the norm of a head vector survives
    the rotation; its per-entry weights do not commute with it)."""

    def normed_and_rotated(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray, i: int):
        q, k, v = self.rope_qkv(q, k, v, positions)
        if self.c.qk_norm:
            q, k = self.qk_norm(q, k, i)
        return q, k, v


class GemmaNormWithoutPlusOne(Transformer):
    """Gemma's RMSNorm multiplied by its stored weight w instead of 1 + w (Llama's norm on Gemma's
    weights, which are stored around 0)."""

    def norm_gain(self, gain: np.ndarray) -> np.ndarray:
        return gain


class NormaliserUnrounded(Transformer):
    """Gemma's embedding normaliser sqrt(d_model) kept exact where `transformers` rounds it to the
    model's dtype (45.2548 instead of bfloat16's 45.25 at d_model 2048): only a narrow format shows it."""

    def normaliser(self) -> np.ndarray:
        return np.asarray(np.sqrt(self.c.d_model), self.dtype)


class GeGLUWithErfGelu(Transformer):
    """Gemma's GeGLU with the exact erf GELU where Gemma uses the tanh approximation
    (`hidden_activation: gelu_pytorch_tanh`)."""

    def gate_act(self, gate: np.ndarray) -> np.ndarray:
        if self.c.mlp_act != "gelu_tanh":
            return super().gate_act(gate)
        return (0.5 * gate * (1 + _erf(gate / math.sqrt(2)))).astype(self.dtype)


class SoftcapAfterMask(Transformer):
    """Gemma 2's attention soft-cap applied after the causal mask: masked scores become -cap, not
    -inf, so every position attends a little to the future."""

    def capped_scores(self, scores: np.ndarray, i: int) -> np.ndarray:
        return scores

    def attend(self, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return self.softmax(self.cap(np.where(allowed, scores, -np.inf), self.c.attn_softcap))


class FinalSoftcapMissing(Transformer):
    """Gemma 2's final logit soft-cap left out."""

    def final_cap(self, logits: np.ndarray) -> np.ndarray:
        return logits


class QueryScaleIgnored(Transformer):
    """Gemma 2's scores scaled by 1/sqrt(d_head) instead of 1/sqrt(query_pre_attn_scalar)."""

    def scale(self) -> float:
        return 1 / np.sqrt(self.c.d_head)


class AttentionSoftcapMissing(Transformer):
    """Gemma 2's attention soft-cap left out (an attention kernel without soft-capping, as SDPA is)."""

    def capped_scores(self, scores: np.ndarray, i: int) -> np.ndarray:
        return scores


class WindowedLayersUncapped(Transformer):
    """The sliding layers' attention without Gemma 2's soft-cap (a windowed kernel that cannot
    soft-cap, as flash-attention before 2.6), the global layers capped."""

    def capped_scores(self, scores: np.ndarray, i: int) -> np.ndarray:
        return scores if self.window(i) is not None else super().capped_scores(scores, i)


class RopeScalingIgnored(Transformer):
    """The config's RoPE scaling ignored (a loader that reads rope_theta and drops rope_scaling)."""

    def scaled(self, inv_freq: np.ndarray) -> np.ndarray:
        return inv_freq


class QKNormSkipped(Transformer):
    """Qwen3's q/k norms not applied (a Llama implementation loading Qwen3 with strict=False)."""

    def qk_norm(self, q: np.ndarray, k: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        return q, k


class QKNormPerHead(Transformer):
    """OLMo 2's q/k norms, which span the whole projection, taken over each head as Qwen3's (each head's
    slice of the gain): a Qwen3-style attention loading OLMo 2's [n_heads d_head] norm weights."""

    def qk_norm_span(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return self.rms_plain(x, gain.reshape(x.shape[1], 1, -1) if self.c.qk_norm_whole else gain)


class NormsBeforeSublayers(Transformer):
    """OLMo 2's norms placed as Llama's: post_attention_layernorm and post_feedforward_layernorm applied to
    the input of attention and of the MLP instead of their output (a Llama block with OLMo 2's weights)."""

    def pre_norm(self, x: np.ndarray, i: int, which: str) -> np.ndarray:
        if self.c.pre_norm:
            return super().pre_norm(x, i, which)
        name = "post_attention_layernorm" if which == "attn" else "post_feedforward_layernorm"
        return self.norm(x, f"model.layers.{i}.{name}")

    def sandwich(self, branch: np.ndarray, i: int, which: str) -> np.ndarray:
        return super().sandwich(branch, i, which) if self.c.pre_norm else branch


class NopeLayersRotated(Transformer):
    """SmolLM3's NoPE layers rotated like the others (a Llama implementation loading SmolLM3, which
    reads no `no_rope_layers`)."""

    def rotates(self, i: int) -> bool:
        return True


class NopeLayersInverted(Transformer):
    """SmolLM3's `no_rope_layers` read by its name: RoPE skipped where the list holds 1 (where transformers
    applies it) and applied where it holds 0."""

    def rotates(self, i: int) -> bool:
        return i in self.c.nope_layers


class SandwichNormMissing(Transformer):
    """Gemma 2's norms after attention and after the MLP left out (Gemma's layer on Gemma 2's weights)."""

    def sandwich(self, branch: np.ndarray, i: int, which: str) -> np.ndarray:
        return branch


# ---- what the families of issue 27 add ----------------------------------------------------------


class TopOneInsteadOfTopK(Transformer):
    """Each token routed to its top-1 expert where the config says top_k (Mixtral's 2): the one
    expert's weight renormalised to 1, or its probability alone."""

    def top_k(self) -> int:
        return 1


class RoutingNotRenormalised(Transformer):
    """The top_k probabilities used as they are where the family renormalises them to sum 1
    (Mixtral; Qwen2-MoE with norm_topk_prob): a port of Qwen2-MoE's router reused for Mixtral."""

    def renormalised(self, weights: np.ndarray) -> np.ndarray:
        return weights


class RoutingRenormalisedWhereNot(Transformer):
    """The top_k probabilities renormalised to sum 1 where the config says not (Qwen2-MoE's
    norm_topk_prob false, its published value): Mixtral's router reused for Qwen2-MoE."""

    def renormalised(self, weights: np.ndarray) -> np.ndarray:
        return weights / weights.sum(-1, keepdims=True)


class RouterSoftmaxWrongAxis(Transformer):
    """The router's softmax over the tokens (axis 0 of the [tokens, experts] logits) instead of
    over the experts."""

    def router_probs(self, logits: np.ndarray) -> np.ndarray:
        e = np.exp(logits - logits.max(0, keepdims=True))
        return e / e.sum(0, keepdims=True)


class SharedExpertUngated(Transformer):
    """Qwen2-MoE's shared expert added without its sigmoid(h w_s) gate."""

    def shared_gate(self, h: np.ndarray, i: int) -> np.ndarray:
        return np.ones((h.shape[0], 1), self.dtype)


class FusedGateUpSwapped(Transformer):
    """Phi-3's / GLM's fused gate_up_proj split as (up, gate): the activation on the wrong half."""

    def gate_up_split(self, gate_up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gate, up = super().gate_up_split(gate_up)
        return up, gate


class FusedQKSwapped(Transformer):
    """Phi-3's fused qkv_proj read as k's rows first, then q's, then v's."""

    def qkv_split(self, qkv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kv_end = self.c.n_kv_heads * self.c.d_head
        q_end = kv_end + self.c.n_heads * self.c.d_head
        return qkv[..., kv_end:q_end], qkv[..., :kv_end], qkv[..., q_end:]


class PartialRotaryWholeHead(Transformer):
    """Partial rotary ignored: RoPE rotates all d_head dims (at d_head's frequencies) where the config
    rotates the first rotary_dim (Phi-3's partial_rotary_factor, GLM's 0.5)."""

    def rotary_dims(self) -> int:
        return self.c.d_head


class InterleavedPairsAsRotateHalf(Transformer):
    """GLM's interleaved RoPE pairs (2i, 2i + 1) read as rotate-half pairs (i, i + r/2)."""

    def interleaved(self) -> bool:
        return False


class ExpertBySlot(Transformer):
    """Each token's k-th choice runs expert k (its slot) instead of the expert it chose, weighted by the
    chosen one's probability (an index into the top-k list used as an expert id)."""

    def route(self, logits: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chosen, weights = super().route(logits, probs)
        return np.broadcast_to(np.arange(chosen.shape[1]), chosen.shape), weights


class ExpertCapacityDropsTokens(Transformer):
    """Experts with a capacity (Switch Transformer's, factor 1.0): each takes at most
    ceil(tokens x top_k / n_experts) of the batch's tokens, in order, and drops the rest (their
    weight 0); padding counts as tokens. A token's output depends on the rest of its batch."""

    def route(self, logits: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chosen, weights = super().route(logits, probs)
        capacity = math.ceil(chosen.size / self.c.n_experts)
        taken = np.zeros(self.c.n_experts, int)
        kept = np.ones(chosen.shape, bool)
        for token, slot in np.ndindex(*chosen.shape):
            e = chosen[token, slot]
            kept[token, slot] = taken[e] < capacity
            taken[e] += 1
        return chosen, np.where(kept, weights, 0)


class FusedGateUpNotLoaded(Transformer):
    """Phi-3's / GLM's fused gate_up_proj not loaded and left at its initialisation (a Llama port whose
    gate_proj / up_proj find nothing under strict=False and that keeps random weights)."""

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if name.endswith("gate_up_proj"):
            w = self.w[name + ".weight"]
            init = np.asarray(0.02 * np.random.default_rng(0).standard_normal(w.shape), self.dtype)
            return x @ init.T
        return super().linear(x, name)


class TopKLogitsThenSoftmax(Transformer):
    """The router's top_k logits chosen, then a softmax over those k alone (Mistral's reference
    `MoeLayer`). Equivalent by construction where the family renormalises (Mixtral): softmax over the
    k largest logits is p_i / sum of the top-k p_j, the renormalised top-k probabilities. A bug only
    where the family does not renormalise (Qwen2-MoE's norm_topk_prob false)."""

    def route(self, logits: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chosen = np.argsort(-logits, axis=-1, kind="stable")[:, : self.top_k()]
        return chosen, self.softmax(np.take_along_axis(logits, chosen, axis=-1))


MUTANTS: tuple[type[Transformer], ...] = tuple(
    cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Transformer) and cls is not Transformer
)
# Mutants whose bug float32 cannot show, and why: the test and the report run them at their class.
FLOAT32_INVISIBLE = {
    "NormaliserUnrounded": "in float32 the normaliser is sqrt(d_model) rounded to float32 either way; it differs "
    "only where the model's dtype is narrower (bfloat16, float16)",
}
# `--model tests.meta.mutants.catalog:mutants.ScaleByDHead` plugs in one mutant; `correct` is the unmutated base.
mutants = SimpleNamespace(**{cls.__name__: factory(cls) for cls in MUTANTS})
correct = factory(Transformer)
# The same at each narrower precision class: `at.bfloat16.ScaleByDHead`, `at.bfloat16.correct`; and
# computed in float32 but judged at a class (`exact_at.bfloat16.GeluExactErf`): its worst error / bound
# is the size of the bug's effect against that class's bounds.
PRECISIONS = ("tf32", "float16", "bfloat16", "q8_0")
at = SimpleNamespace(
    **{
        p: SimpleNamespace(correct=factory(Transformer, p), **{cls.__name__: factory(cls, p) for cls in MUTANTS})
        for p in PRECISIONS
    }
)
exact_at = SimpleNamespace(
    **{p: SimpleNamespace(**{cls.__name__: factory(cls, declared=p) for cls in MUTANTS}) for p in PRECISIONS}
)
