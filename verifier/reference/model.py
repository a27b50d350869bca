"""The NumPy forward pass of GPT-2 and Llama: full pass, KV-cached chunks and a stage trace.

Data flow of one call: tokens [B, T] -> embeddings [B, T, d_model] -> n_layers pre-norm blocks
(attention then MLP, each added to the residual stream) -> final norm -> classifier
[B, T, vocab_size]. Every intermediate the trace records is named in `verifier.model.stages`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights, cast, classifier
from verifier.reference import gpt2, llama
from verifier.reference import layers as L
from verifier.reference.recorder import Rope, Stage, passing
from verifier.reference.rounding import Rounding


class InputError(ValueError):
    """Tokens or an attention mask that the model cannot take; the message says what and why."""


@dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer for the positions processed so far.

    `layers[i]` is (keys, values), each [B, S, n_kv_heads, d_head]; keys are stored after RoPE.
    A cache is never modified: `decode` returns a new one, so an old cache stays reusable.
    """

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def length(self) -> int:
        """S, the number of positions held."""
        return self.layers[0][0].shape[1] if self.layers else 0

    @property
    def shape(self) -> tuple[int, ...]:
        """The documented layout: [n_layers, 2, B, S, n_kv_heads, d_head]."""
        k = self.layers[0][0]
        return (len(self.layers), 2, *k.shape)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


class NumpyModel:
    """The reference model for one config and weight set, in float32 or float64.

    `logits(tokens)` takes [T] or [B, T] int tokens and returns [T, V] or [B, T, V];
    `decode(tokens, cache)` continues a KVCache with a chunk of new tokens;
    `trace(tokens)` returns every stage of one sequence [T] (see `verifier.model.stages`).
    With `rounding` (`verifier.reference.rounding`), it runs at a narrower precision: float32
    arithmetic, its weights and the outputs of the stages the rounding names rounded to the format.
    """

    def __init__(
        self,
        config: ModelConfig,
        weights: Weights,
        dtype: npt.DTypeLike = np.float32,
        rounding: Rounding | None = None,
    ) -> None:
        self.config = config
        self.dtype = np.dtype(dtype)
        self.rounding = rounding
        self.weights = cast(weights, self.dtype)
        if rounding is not None:
            self.weights = {name: rounding.weights(name, w).astype(self.dtype) for name, w in self.weights.items()}
        self._family = gpt2 if config.family == "gpt2" else llama
        if config.family == "llama":
            # `h @ W.T` reads a [d_out, d_in] weight fastest (1.5x in a decode step here) when W.T is a
            # contiguous [d_in, d_out] array: hold the projections column-major. Same values.
            self.weights = {k: np.asfortranarray(w) if "layers." in k else w for k, w in self.weights.items()}
        self._classifier = np.asfortranarray(classifier(config, self.weights))  # [V, d_model]; likewise

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """Logits of every position: [T] -> [T, V], [B, T] -> [B, T, V].

        `attention_mask` ([B, T] or [T], 1 = real token, 0 = padding) hides padded keys and
        numbers positions by real tokens only, so a left-padded row equals the row run alone.
        """
        batch = self._check_tokens(tokens, past=0)
        if attention_mask is None:
            logits, _ = self._forward(batch, None, passing)
        else:
            mask = self._check_mask(attention_mask, batch)
            logits, _ = self._forward(batch, None, passing, key_mask=mask)
        return logits if np.ndim(tokens) == 2 else logits[0]

    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        """Logits of a chunk of new tokens after `cache` (None: an empty cache), and the new cache."""
        past = cache.length if cache is not None else 0
        batch = self._check_tokens(tokens, past=past)
        if cache is not None and cache.layers[0][0].shape[0] != batch.shape[0]:
            raise InputError(f"tokens have batch size {batch.shape[0]}, the cache has {cache.layers[0][0].shape[0]}")
        logits, new_cache = self._forward(batch, cache, passing)
        return (logits if np.ndim(tokens) == 2 else logits[0]), new_cache

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Every stage's output for one sequence [T], keyed by stage name, batch axis removed."""
        if np.ndim(tokens) != 1:
            raise InputError(f"trace takes one sequence [T], found shape {np.shape(tokens)}")
        record: dict[str, np.ndarray] = {}

        def keep(stage: str, value: np.ndarray) -> np.ndarray:
            record[stage] = value[0]
            return value

        self._forward(self._check_tokens(tokens, past=0), None, keep)
        return record

    def _check_tokens(self, tokens: np.ndarray, past: int) -> np.ndarray:
        t = np.asarray(tokens)
        if t.ndim not in (1, 2) or t.shape[-1] == 0:
            raise InputError(f"tokens must be [T] or [B, T] with T >= 1, found shape {t.shape}")
        if not np.issubdtype(t.dtype, np.integer):
            raise InputError(f"tokens must be integers, found dtype {t.dtype}")
        V = self.config.vocab_size
        if t.min() < 0 or t.max() >= V:
            raise InputError(f"token ids must be in [0, {V}), found min {t.min()} max {t.max()}")
        if past + t.shape[-1] > self.config.n_ctx:
            raise InputError(f"{past} cached + {t.shape[-1]} new positions exceed n_ctx={self.config.n_ctx}")
        return t.reshape(-1, t.shape[-1]).astype(np.int64)

    def _check_mask(self, attention_mask: np.ndarray, batch: np.ndarray) -> np.ndarray:
        mask = np.asarray(attention_mask).reshape(-1, np.shape(attention_mask)[-1])
        if mask.shape != batch.shape:
            raise InputError(f"attention_mask shape {np.shape(attention_mask)} does not match tokens {batch.shape}")
        if not np.isin(mask, (0, 1)).all():
            raise InputError("attention_mask must hold only 0 and 1")
        return mask.astype(bool)

    def _stage(self, record: Stage) -> Stage:
        """`record` after this model's rounding of each stage it rounds."""
        rounding = self.rounding
        if rounding is None:
            return record

        def rounded(stage: str, value: np.ndarray) -> np.ndarray:
            return record(stage, rounding.activations(value) if rounding.rounds(stage) else value)

        return rounded

    def _forward(
        self, tokens: np.ndarray, cache: KVCache | None, record: Stage, key_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, KVCache]:
        """tokens [B, T] after `cache` -> (logits [B, T, V], cache + this chunk)."""
        stage = self._stage(record)
        B, T = tokens.shape
        past = cache.length if cache is not None else 0
        positions = np.broadcast_to(np.arange(past, past + T), (B, T))
        allowed = L.causal_mask(T, past + T)[None, None]  # [1, 1, T, S]
        if key_mask is not None:
            positions = np.maximum(np.cumsum(key_mask, axis=1) - 1, 0)
            # A padded query still sees itself, so its (unused) softmax row is never all -inf.
            allowed = allowed & (key_mask[:, None, None, :] | np.eye(T, dtype=bool))
        f, w, c = self._family, self.weights, self.config
        x = stage(stages.EMBED, f.embed(w, c, tokens, positions))
        new_layers = []
        rope = f.rope(c, positions, self.dtype)
        for i in range(c.n_layers):
            past_kv = cache.layers[i] if cache is not None else None
            x, kv = self._block(i, x, rope, allowed, past_kv, stage)
            new_layers.append(kv)
        x = stage(stages.FINAL_NORM, f.final_norm(w, c, x))
        logits = stage(stages.LOGITS, x @ self._classifier.T)
        return logits, KVCache(tuple(new_layers))

    def _block(
        self,
        i: int,
        x: np.ndarray,
        rope: Rope,
        allowed: np.ndarray,
        past_kv: tuple[np.ndarray, np.ndarray] | None,
        stage: Stage,
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """One pre-norm block, [B, T, d_model] -> [B, T, d_model]: x + attn(norm(x)), then + mlp(norm(.)).

        Also returns this layer's keys and values, [B, S, n_kv_heads, d_head] each, cache included.
        """
        f, w, c = self._family, self.weights, self.config

        def at(op: str, value: np.ndarray) -> np.ndarray:
            return stage(stages.layer_stage(i, op), value)

        h = at("attn_norm", f.norm(w, c, i, "attn", x))
        q, k, v = f.qkv(w, c, i, h, rope, stage)  # [B, heads, T, d_head]
        if past_kv is not None:
            k = np.concatenate([past_kv[0].transpose(0, 2, 1, 3), k], axis=2)
            v = np.concatenate([past_kv[1].transpose(0, 2, 1, 3), v], axis=2)
        out, _, _ = L.attention(q, k, v, allowed, at)
        attn = at("attn", L.merge_heads(out))
        projected = at("attn_out", f.attn_out(w, c, i, attn))
        x = at("resid_attn", x + projected)
        h = at("mlp_norm", f.norm(w, c, i, "mlp", x))
        mlp_out = at("mlp_out", f.mlp(w, c, i, h, stage))
        x = at("resid_mlp", x + mlp_out)
        return x, (k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
