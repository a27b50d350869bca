"""A few deliberately broken models, each one realistic bug in a copy of the NumPy reference,
plugged in as a user would (`pytest --model tests.meta.targeted_mutants:NAME`) to prove that a property
can fail. Not part of the product; the full catalog (issue 6) will live beside this file.

Most mutants are the reference with one function of `verifier.reference` swapped for the buggy
one during each call (the swap is undone after the call, so other models are unaffected).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from verifier.config import ModelConfig
from verifier.reference import KVCache, NumpyModel, gpt2, layers
from verifier.weights import Weights

_erf = np.vectorize(math.erf)
_orig = {name: getattr(layers, name) for name in ("attention", "causal_mask", "rope_tables", "apply_rope")}
_orig_gpt2_embed = gpt2.embed


class Patched:
    """The float32 reference with `patches` ({(module, name): replacement}) in force during each call."""

    def __init__(self, config: ModelConfig, weights: Weights, patches: dict[tuple[Any, str], Callable[..., Any]]):
        self.reference = NumpyModel(config, weights)
        self.patches = patches

    @contextlib.contextmanager
    def _patched(self) -> Iterator[None]:
        saved = {key: getattr(*key) for key in self.patches}
        try:
            for (module, name), fn in self.patches.items():
                setattr(module, name, fn)
            yield
        finally:
            for (module, name), fn in saved.items():
                setattr(module, name, fn)

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        with self._patched():
            return self.reference.logits(tokens, attention_mask=attention_mask)

    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        with self._patched():
            return self.reference.decode(tokens, cache)

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        with self._patched():
            return self.reference.trace(tokens)


def _patching(**replacements: Callable[..., Any]) -> Callable[[ModelConfig, Weights], Patched]:
    def factory(config: ModelConfig, weights: Weights) -> Patched:
        return Patched(config, weights, {(layers, name): fn for name, fn in replacements.items()})

    return factory


def _softmax_without_max(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))).astype(x.dtype)


def _gqa_modulo(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray) -> Any:
    order = np.arange(q.shape[1]) % k.shape[1]  # query head h reads kv head h % n_kv, not h // group
    return _orig["attention"](q, k[:, order], v[:, order], allowed)


def _mask_after_softmax(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray) -> Any:
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = layers.attention_scores(q, k)
    probs = layers.softmax(scores) * allowed  # masked after the softmax: rows no longer sum to 1
    return probs @ v, scores, probs


def _rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """llama2.c's pairing (2i, 2i+1) applied to weights in the rotate-half layout."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None].astype(x.dtype), sin[:, None].astype(x.dtype)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    return out


def _norm_over_batch(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm whose mean square also runs over the batch axis."""
    return x / np.sqrt(np.square(x).mean(axis=(0, -1), keepdims=True) + eps) * gain


softmax_without_max = _patching(softmax=_softmax_without_max)
mask_missing = _patching(causal_mask=lambda T, S: np.ones((T, S), dtype=bool))
attend_only_to_self = _patching(causal_mask=lambda T, S: np.arange(S)[None, :] == np.arange(S - T, S)[:, None])
mask_after_softmax = _patching(attention=_mask_after_softmax)
gelu_erf = _patching(gelu_tanh=_gelu_erf)
gqa_modulo = _patching(attention=_gqa_modulo)
rope_positions_from_1 = _patching(rope_tables=lambda p, d, theta: _orig["rope_tables"](p + 1, d, theta))
rope_interleaved_on_rotate_half = _patching(apply_rope=_rope_interleaved)
rms_norm_over_batch = _patching(rms_norm=_norm_over_batch)


def rope_missing_on_k(config: ModelConfig, weights: Weights) -> Patched:
    calls = {"n": 0}

    def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        calls["n"] += 1  # the reference rotates q, then k: leave every second call (k) alone
        return _orig["apply_rope"](x, cos, sin) if calls["n"] % 2 else x

    return Patched(config, weights, {(layers, "apply_rope"): apply_rope})


def gpt2_positions_clipped_at_128(config: ModelConfig, weights: Weights) -> Patched:
    def embed(w: Weights, c: ModelConfig, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return _orig_gpt2_embed(w, c, tokens, np.minimum(positions, 127))

    return Patched(config, weights, {(gpt2, "embed"): embed})


def norm_eps_1e_6(config: ModelConfig, weights: Weights) -> NumpyModel:
    return NumpyModel(config.replace(norm_eps=1e-6), weights)


def rope_theta_1000(config: ModelConfig, weights: Weights) -> NumpyModel:
    return NumpyModel(config.replace(rope_theta=1000.0), weights)


class _Reference(NumpyModel):
    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)


class ChunkAppendedTwice(_Reference):
    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        logits, new = super().decode(tokens, cache)
        T = np.shape(tokens)[-1]
        doubled = tuple((np.concatenate([k, k[:, -T:]], 1), np.concatenate([v, v[:, -T:]], 1)) for k, v in new.layers)
        return logits, KVCache(doubled) if new.length + T <= self.config.n_ctx else new


class StaleCache(_Reference):
    """Keeps the last cache it made and continues from it, whatever cache it is given."""

    _last: KVCache | None = None

    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        logits, self._last = super().decode(tokens, self._last if cache is not None else None)
        return logits, self._last


class IgnoresAttentionMask(_Reference):
    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        return super().logits(tokens)


class Drifting(_Reference):
    """Each call's logits move a little: state that leaks from one call into the next."""

    calls = 0

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        out = super().logits(tokens, attention_mask)
        self.calls += 1
        return out + np.float32(1e-3) * (self.calls - 1)


class TraceQAsTokensFirst(_Reference):
    """Traces q as [T, n_heads, d_head] instead of the documented [n_heads, T, d_head]."""

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        trace = super().trace(tokens)
        return {s: a.transpose(1, 0, 2) if s.endswith(".q") else a for s, a in trace.items()}


class FirstRowGreedy:
    """A generate-only black box that takes its next token from the first row of logits, not the last."""

    capabilities = frozenset({"greedy"})

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.reference = NumpyModel(config, weights)

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        tokens = list(prompt)
        for _ in range(n_new):
            tokens.append(int(np.argmax(self.reference.logits(np.array(tokens))[0])))
        return np.array(tokens[len(prompt) :], dtype=np.int64)


chunk_appended_twice = ChunkAppendedTwice
stale_cache = StaleCache
ignores_attention_mask = IgnoresAttentionMask
drifting = Drifting
trace_q_tokens_first = TraceQAsTokensFirst
first_row_greedy = FirstRowGreedy
