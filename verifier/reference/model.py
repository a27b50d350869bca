"""The NumPy forward pass of GPT-2 and the Llama-layout families: full pass, KV-cached chunks and a
stage trace.

Data flow of one call: tokens [B, T] -> embeddings [B, T, d_model] (times Gemma's normaliser) ->
n_layers pre-norm blocks (attention then MLP, each added to the residual stream; Gemma 2 also
normalises each one's output) -> final norm -> classifier [B, T, vocab_size] (soft-capped where the
family caps). A layer with a sliding window W masks keys more than W - 1 positions back, in a full
pass and while decoding. Every intermediate the trace records is named in `verifier.model.stages`.

Weights come from any mapping of canonical names to arrays. Each weight is converted to the
model's dtype by one mapping (`_Converted`) and looked up where the layer uses it. A resident
model converts them all once; a streaming one (`stream=True`) converts each when the pass reaches
it, into the memory of the last weight of its shape the pass dropped, so a model read from a mapped
file holds about one layer's weights (in float64 for the oracle) plus activations and the KV cache,
whatever its size; a mixture-of-experts layer reads its experts one at a time (`llama.moe`). Both
run the same code on the same converted arrays, so their outputs are bit for bit the same.

A MoE model's expert choice can be overridden (`routes`, {layer: [B, T, top_k] expert indices}) in
`logits`, `router_probs` and `trace`: where the router's k-th and (k+1)-th probabilities nearly tie,
the oracle computes the logits of either choice.

With a `rounding` (`verifier.reference.rounding`) the model runs at a narrower precision: float32
arithmetic, its weights and the outputs of the stages the rounding names rounded to the format.
Every stage's output passes through one callback (`Stage`), which records it for a trace and
returns the value the pass goes on with.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from verifier.messages import BoundedMessage
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import EMBEDDING, LazyWeights, WeightMap, classifier_name
from verifier.reference import gpt2, llama
from verifier.reference import layers as L
from verifier.reference.recorder import Rope, Routes, Stage, passing
from verifier.reference.rounding import Rounding

# Tables the forward pass indexes by token or position: kept as given (converted row by row in `embed`).
_TABLES = frozenset({*EMBEDDING.values(), "transformer.wpe.weight"})


class InputError(BoundedMessage, ValueError):
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


class _Converted(Mapping[str, np.ndarray]):
    """`weights` as the forward pass uses them: each array converted to `dtype` when looked up,
    except the tables indexed by token or position, which `embed` converts row by row; with a
    `rounding`, every weight (tables too) converted and rounded to its format.

    With `reuse` (a streaming model), a weight is read (where its reader can: `LazyWeights.read_into`)
    and converted into the memory of an earlier one of its shape that nothing refers to any more: a
    streamed pass reads and converts every weight at every pass, and into fresh pages that costs
    several times the copy while the page cache holds a checkpoint larger than memory (the kernel
    reclaims a page for each; measured in benchmarks/RESULTS.md)."""

    def __init__(
        self, weights: WeightMap, dtype: np.dtype, rounding: Rounding | None = None, *, reuse: bool = False
    ) -> None:
        self._weights = weights
        self._dtype = dtype
        self._rounding = rounding
        self._spare: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] | None = {} if reuse else None

    def __getitem__(self, name: str) -> np.ndarray:
        if self._rounding is not None:
            w = self._weights[name]
            return self._rounding.weights(name, np.asarray(w, dtype=self._dtype)).astype(self._dtype)
        if name in _TABLES:
            return np.asarray(self._weights[name])
        if self._spare is None:  # resident: converted once
            return np.asarray(self._weights[name], dtype=self._dtype)
        read = self._read_into_held(name)
        if read is not None:
            return read
        w = np.asarray(self._weights[name])
        if w.dtype == self._dtype:
            return w
        out = self._unused(w.shape, self._dtype)
        np.copyto(out, w)
        return out

    def _read_into_held(self, name: str) -> np.ndarray | None:
        """Weight `name` read by the reader into float32 memory held from an earlier lookup (then
        converted into held memory of the model's dtype), or None where the reader cannot."""
        if not isinstance(self._weights, LazyWeights) or not self._weights.reads_into:
            return None
        shape = self._weights.shapes[name]
        staging = self._unused(shape, np.dtype(np.float32))
        if not self._weights.read_into(name, staging):
            return None
        if self._dtype == staging.dtype:
            return staging
        out = self._unused(shape, self._dtype)
        np.copyto(out, staging)
        return out

    def _unused(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of `shape` and `dtype` that no weight or view of one refers to: one of an earlier
        lookup, once the pass has dropped it, or a new one (kept for later lookups)."""
        assert self._spare is not None, "only a streaming model's lookups reuse memory"
        buffers = self._spare.setdefault((shape, dtype), [])
        for buffer in buffers:
            # CPython counts the references: the list's, this loop's and getrefcount's argument; any
            # other (a weight still in use, a transposed view whose base it is) means it is taken.
            if sys.getrefcount(buffer) == 3:
                return buffer
        buffers.append(np.empty(shape, dtype))
        return buffers[-1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._weights)

    def __len__(self) -> int:
        return len(self._weights)


class NumpyModel:
    """The reference model for one config and weight set, in float32 or float64.

    `logits(tokens)` takes [T] or [B, T] int tokens and returns [T, V] or [B, T, V];
    `decode(tokens, cache)` continues a KVCache with a chunk of new tokens;
    `trace(tokens)` returns every stage of one sequence [T] (see `verifier.model.stages`), and
    `trace_layers(tokens)` the same stages one layer at a time.

    `weights` maps canonical names to arrays (a dict, or `verifier.model.weights.LazyWeights`).
    With `stream=True` each weight is looked up and converted when a pass needs it, never held.
    With `rounding`, it runs at a narrower precision (see the module's docstring).
    """

    def __init__(
        self,
        config: ModelConfig,
        weights: WeightMap,
        dtype: npt.DTypeLike = np.float32,
        rounding: Rounding | None = None,
        *,
        stream: bool = False,
    ) -> None:
        self.config = config
        self.dtype = np.dtype(dtype)
        self.rounding = rounding
        self.stream = stream
        self._family = gpt2 if config.family == "gpt2" else llama
        converted = _Converted(weights, self.dtype, rounding, reuse=stream)
        self._weights: WeightMap = converted if stream else dict(converted)
        self._resident_classifier = None if stream else self._classifier()
        normaliser = llama.embed_normaliser(config, self.dtype) if config.uses_rope else None
        # A tensor of the model's dtype in transformers: rounded to the format at a narrower precision.
        self._normaliser = normaliser if normaliser is None or rounding is None else rounding.constant(normaliser)

    @property
    def weights(self) -> WeightMap:
        """The weights as the forward pass uses them: converted (and rounded, at a class); a dict
        when resident, a converting view when streamed."""
        return self._weights

    def _classifier(self) -> np.ndarray:
        """The classifier [V, d_model] in the model's dtype (a tied one is the embedding table, converted)."""
        return np.asarray(self._weights[classifier_name(self.config)], dtype=self.dtype)

    def logits(
        self, tokens: np.ndarray, attention_mask: np.ndarray | None = None, *, routes: Routes | None = None
    ) -> np.ndarray:
        """Logits of every position: [T] -> [T, V], [B, T] -> [B, T, V].

        `attention_mask` ([B, T] or [T], 1 = real token, 0 = padding) hides padded keys and
        numbers positions by real tokens only, so a left-padded row equals the row run alone.
        `routes` (MoE families) overrides the router's choice: {layer: int [B, T, top_k] or [T, top_k]
        expert indices, distinct per token}; the listed layers use those experts, weighted by their
        router probabilities (renormalised where the family does), the others choose their own top_k.
        The oracle computes either side of a near-tie with it (see `router_probs`).
        """
        batch = self._check_tokens(tokens, past=0)
        mask = None if attention_mask is None else self._check_mask(attention_mask, batch)
        logits, _ = self._forward(batch, None, passing, key_mask=mask, routes=self._check_routes(routes, batch))
        return logits if np.ndim(tokens) == 2 else logits[0]

    def router_probs(
        self, tokens: np.ndarray, attention_mask: np.ndarray | None = None, *, routes: Routes | None = None
    ) -> dict[int, np.ndarray]:
        """Each MoE layer's router probabilities {layer: [B, T, n_experts]} ([T, n_experts] for tokens [T])
        in the pass `logits` makes with the same arguments (a layer after an overridden one sees the
        inputs that override gives it). Sorted, row t's k-th and (k+1)-th entries show a near-tie."""
        batch = self._check_tokens(tokens, past=0)
        mask = None if attention_mask is None else self._check_mask(attention_mask, batch)
        found: dict[int, np.ndarray] = {}

        def keep(stage: str, value: np.ndarray) -> np.ndarray:
            layer, op = stages.split_stage(stage)
            if op == "router_probs" and layer is not None:
                found[layer] = value if np.ndim(tokens) == 2 else value[0]
            return value

        self._forward(batch, None, keep, key_mask=mask, routes=self._check_routes(routes, batch))
        return found

    def decode(self, tokens: np.ndarray, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        """Logits of a chunk of new tokens after `cache` (None: an empty cache), and the new cache."""
        past = cache.length if cache is not None else 0
        batch = self._check_tokens(tokens, past=past)
        if cache is not None and cache.layers[0][0].shape[0] != batch.shape[0]:
            raise InputError(f"tokens have batch size {batch.shape[0]}, the cache has {cache.layers[0][0].shape[0]}")
        logits, new_cache = self._forward(batch, cache, passing)
        return (logits if np.ndim(tokens) == 2 else logits[0]), new_cache

    def trace(self, tokens: np.ndarray, *, routes: Routes | None = None) -> dict[str, np.ndarray]:
        """Every stage's output for one sequence [T], keyed by stage name, batch axis removed; `routes`
        ({layer: [T, top_k]}) as `logits` takes them."""
        record: dict[str, np.ndarray] = {}
        for group in self.trace_layers(tokens, routes=routes):
            record |= group
        return record

    def trace_layers(self, tokens: np.ndarray, *, routes: Routes | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The stages of `trace`, one group at a time: `embed`, then each layer's, then `final_norm`
        and `logits`. Each group is computed when asked for; a consumer that drops it holds one."""
        if np.ndim(tokens) != 1:
            raise InputError(f"trace takes one sequence [T], found shape {np.shape(tokens)}")
        groups: list[dict[str, np.ndarray]] = [{}]

        def keep(stage: str, value: np.ndarray) -> np.ndarray:
            groups[-1][stage] = value[0]
            return value

        batch = self._check_tokens(tokens, past=0)
        for _ in self._steps(batch, None, keep, routes=self._check_routes(routes, batch)):
            yield groups.pop()
            groups.append({})
        yield groups.pop()

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

    def _check_routes(self, routes: Routes | None, batch: np.ndarray) -> dict[int, np.ndarray]:
        """`routes` as {layer: int [B, T, top_k]}; InputError naming the layer where one cannot be a choice."""
        c, checked = self.config, {}
        for layer, chosen in (routes or {}).items():
            if not (isinstance(layer, int) and 0 <= layer < c.n_layers and c.is_moe_layer(layer)):
                raise InputError(f"routes: layer {layer!r} is not a MoE layer of this {c.family} model")
            experts = np.asarray(chosen).reshape(-1, *np.shape(chosen)[-2:])
            if experts.shape != (*batch.shape, c.top_k):
                found = np.shape(chosen)
                raise InputError(f"routes[{layer}]: shape {found} is not [B, T, top_k] = {(*batch.shape, c.top_k)}")
            if not np.issubdtype(experts.dtype, np.integer) or experts.min() < 0 or experts.max() >= c.n_experts:
                raise InputError(f"routes[{layer}]: expert indices must be integers in [0, {c.n_experts})")
            ordered = np.sort(experts, axis=-1)
            if (ordered[..., 1:] == ordered[..., :-1]).any():
                raise InputError(f"routes[{layer}]: a token chooses the same expert twice")
            checked[layer] = experts
        return checked

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

    def _moving_scores(self, at: Stage, q: np.ndarray, k: np.ndarray, allowed: np.ndarray) -> Stage:
        """`at`, after the rounding's move of the attention scores where it has one (it needs the
        q [B, h, T, d_head] and k [B, kv, S, d_head] the scores come from)."""
        move = self.rounding.scores if self.rounding is not None else None
        if move is None:
            return at
        return lambda op, value: at(op, move(value, q, k, allowed) if op == "scores" else value)

    def _forward(
        self,
        tokens: np.ndarray,
        cache: KVCache | None,
        record: Stage,
        key_mask: np.ndarray | None = None,
        routes: Mapping[int, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, KVCache]:
        """tokens [B, T] after `cache` -> (logits [B, T, V], cache + this chunk)."""
        steps = self._steps(tokens, cache, record, key_mask, routes)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def _steps(
        self,
        tokens: np.ndarray,
        cache: KVCache | None,
        record: Stage,
        key_mask: np.ndarray | None = None,
        routes: Mapping[int, np.ndarray] | None = None,
    ) -> Generator[None, None, tuple[np.ndarray, KVCache]]:
        """The forward pass of `_forward`, pausing after the embedding and after each block."""
        stage = self._stage(record)
        B, T = tokens.shape
        past = cache.length if cache is not None else 0
        positions = np.broadcast_to(np.arange(past, past + T), (B, T))
        f, w, c = self._family, self._weights, self.config
        # The keys each query sees, [B or 1, 1, T, S], per window W (None: every earlier key). Windows
        # count cache slots as transformers does: a left-padded row's real tokens are contiguous.
        allowed = {W: L.causal_mask(T, past + T, W)[None, None] for W in {c.window(i) for i in range(c.n_layers)}}
        if key_mask is not None:
            positions = np.maximum(np.cumsum(key_mask, axis=1) - 1, 0)
            # A padded query still sees itself, so its (unused) softmax row is never all -inf.
            sees = key_mask[:, None, None, :] | np.eye(T, dtype=bool)
            allowed = {W: mask & sees for W, mask in allowed.items()}
        x = f.embed(w, c, tokens, positions, self.dtype)
        x = stage(stages.EMBED, x if self._normaliser is None else x * self._normaliser)
        yield
        new_layers = []
        rope = f.rope(c, positions, self.dtype)
        for i in range(c.n_layers):
            past_kv = cache.layers[i] if cache is not None else None
            x, kv = self._block(i, x, rope, allowed[c.window(i)], past_kv, stage, (routes or {}).get(i))
            new_layers.append(kv)
            yield
        x = stage(stages.FINAL_NORM, f.final_norm(w, c, x))
        classifier = self._classifier() if self._resident_classifier is None else self._resident_classifier
        logits = L.linear(x, classifier.T)
        logits = stage(stages.LOGITS, logits if c.final_softcap is None else L.softcap(logits, c.final_softcap))
        return logits, KVCache(tuple(new_layers))

    def _block(
        self,
        i: int,
        x: np.ndarray,
        rope: Rope,
        allowed: np.ndarray,
        past_kv: tuple[np.ndarray, np.ndarray] | None,
        stage: Stage,
        chosen: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """One pre-norm block, [B, T, d_model] -> [B, T, d_model]: x + attn(norm(x)), then + mlp(norm(.));
        with sandwich norms (Gemma 2) x + norm(attn(norm(x))), then + norm(mlp(norm(.))); without the
        norms before (OLMo 2) x + norm(attn(x)), then + norm(mlp(.)). A MoE layer's
        MLP is its routed experts (`llama.moe`), `chosen` [B, T, top_k] overriding the router's choice.

        Also returns this layer's keys and values, [B, S, n_kv_heads, d_head] each, cache included.
        """
        f, w, c = self._family, self._weights, self.config

        def at(op: str, value: np.ndarray) -> np.ndarray:
            return stage(stages.layer_stage(i, op), value)

        h = at("attn_norm", f.norm(w, c, i, "attn", x)) if c.pre_norm else x
        q, k, v = f.qkv(w, c, i, h, rope, stage)  # [B, heads, T, d_head]
        if past_kv is not None:
            k = np.concatenate([past_kv[0].transpose(0, 2, 1, 3), k], axis=2)
            v = np.concatenate([past_kv[1].transpose(0, 2, 1, 3), v], axis=2)
        # Gemma 2's query_pre_attn_scalar sets the scale; elsewhere attention's own 1/sqrt(d_head).
        scale = c.attention_scale if c.query_scale is not None else None
        # An untraced pass at the model's own precision watches no scores or probabilities: attention
        # may then take its queries in blocks and skip the keys a block does not see.
        watched = self._moving_scores(at, q, k, allowed) if stage is not passing else None
        out = L.attention(q, k, v, allowed, watched, scale=scale, cap=c.attn_softcap)
        attn = at("attn", L.merge_heads(out))
        projected = at("attn_out", f.attn_out(w, c, i, attn))
        if c.sandwich_norm:
            projected = at("attn_post_norm", f.norm(w, c, i, "attn_post", projected))
        x = at("resid_attn", x + projected)
        h = at("mlp_norm", f.norm(w, c, i, "mlp", x)) if c.pre_norm else x
        if c.is_moe_layer(i):  # an expert's hidden values rounded as a dense MLP's, not recorded
            mlp = llama.moe(w, c, i, h, stage, chosen, inner=self._stage(passing))
        else:
            mlp = f.mlp(w, c, i, h, stage)
        mlp_out = at("mlp_out", mlp)
        if c.sandwich_norm:
            mlp_out = at("mlp_post_norm", f.norm(w, c, i, "mlp_post", mlp_out))
        x = at("resid_mlp", x + mlp_out)
        return x, (k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
