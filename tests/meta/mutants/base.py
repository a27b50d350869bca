"""A correct NumPy GPT-2 / Llama-layout model written to be mutated: every step is a method to override.

It is a second implementation (not the suite's reference): a mutant subclasses `Transformer`,
overrides the one method that holds its bug, and is plugged in with `factory(MutantClass)`.
It has every capability of the contract: logits (with attention_mask), decode, trace, greedy.
`factory(MutantClass, precision)` computes at a precision class ("tf32", "float16", "bfloat16",
"q8_0"; `Rounding` below, written independently of the suite's reference) and declares it:
weights rounded, and each stage's output rounded where the format rounds it.
Every switch of the contract (`ModelConfig`: biases, q/k norm, RoPE scaling, sliding windows and
layer types, soft-caps, Gemma's 1 + w norm, embedding normaliser and GeGLU, Gemma 2's sandwich
norms and query scale; issue 27's routed experts (router softmax, top-k choice, renormalisation,
shared expert and its gate), fused q/k/v and gate/up matrices, partial rotary and interleaved
pairs; SmolLM3's layers without RoPE; OLMo 2's q/k norms over the projection and norms after the
sublayers only) is its own method too; `tests/meta/test_base.py` checks the whole against
`transformers` in float64 (precision "float64") for every family.
Shapes: x [B, T, d_model]; per-head q, k, v [B, heads, T, d_head]; a cache is a tuple per layer
of (k, v) [B, kv_heads, S, d_head], never modified after it is returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Cache = tuple[tuple[np.ndarray, np.ndarray], ...]


def _bfloat16(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).float().numpy()


def _float16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _tf32(x: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000  # round to nearest even at 10 mantissa bits
    return bits.astype(np.uint32).view(np.float32)


def _q8_0(x: np.ndarray, axis: int = -1, group: int = 32) -> np.ndarray:
    """Q8_0 as llama.cpp stores it (ggml's quantize_row_q8_0_ref): groups of 32 along `axis`,
    d = max|x| / 127, q = roundf(x / d), d kept in float16."""
    x = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    n = x.shape[-1]
    full = np.concatenate([x, np.zeros((*x.shape[:-1], -n % group), np.float32)], axis=-1)
    g = full.reshape(*x.shape[:-1], -1, group)
    d = np.abs(g).max(-1, keepdims=True) / np.float32(127)
    scaled = g * np.where(d == 0, 0, 1 / np.where(d == 0, 1, d)).astype(np.float32)
    q = np.trunc(scaled + np.copysign(np.float32(0.5), scaled)) * _float16(d)
    return np.moveaxis(q.reshape(full.shape)[..., :n], -1, axis)


_WEIGHT_INPUTS = {"attn_norm", "attn", "mlp_norm", "mlp_act", "final_norm"}
# What each class rounds: (activation rounding, stages rounded (None: all), weight rounding (name, w) -> w).
ROUNDING: dict[str, tuple[Callable[[np.ndarray], np.ndarray], set[str] | None, Callable[..., np.ndarray]]] = {
    "bfloat16": (_bfloat16, None, lambda name, w: _bfloat16(w)),
    "float16": (_float16, None, lambda name, w: _float16(w)),
    "tf32": (
        _tf32,
        _WEIGHT_INPUTS | {"q", "k", "v", "q_rope", "k_rope", "probs"},
        lambda name, w: _tf32(w) if w.ndim == 2 else w,
    ),
    "q8_0": (
        _q8_0,
        _WEIGHT_INPUTS,
        lambda name, w: _q8_0(w, axis=0 if name.startswith("transformer.h.") else -1) if w.ndim == 2 else w,
    ),
}


class Transformer:
    def __init__(self, config: Any, weights: dict[str, np.ndarray], precision: str = "float32") -> None:
        self.c = config
        # "float64" computes in float64 (to check this implementation against transformers); the rest in float32.
        self.dtype = np.float64 if precision == "float64" else np.float32
        self.w = {name: np.asarray(value, self.dtype) for name, value in weights.items()}
        self.gpt2 = config.family == "gpt2"
        self._trace: dict[str, np.ndarray] | None = None
        self.precision = precision
        self._rounding = ROUNDING.get(precision)
        if self._rounding is not None:
            self.w = {name: self._rounding[2](name, w) for name, w in self.w.items()}

    # ---- the interface ---------------------------------------------------------------------
    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        batch = np.atleast_2d(tokens)
        mask = None if attention_mask is None else np.atleast_2d(attention_mask).astype(bool)
        out, _ = self.forward(batch, None, mask)
        return out if np.ndim(tokens) == 2 else out[0]

    def decode(self, tokens: np.ndarray, cache: Cache | None = None) -> tuple[np.ndarray, Cache]:
        out, new_cache = self.forward(np.atleast_2d(tokens), cache, None)
        return (out if np.ndim(tokens) == 2 else out[0]), new_cache

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        self._trace = {}
        try:
            self.forward(np.atleast_2d(tokens), None, None)
            return {stage: value[0] for stage, value in self._trace.items()}
        finally:
            self._trace = None

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        out, cache = self.decode(prompt)
        tokens = []
        for _ in range(n_new):
            tokens.append(int(self.next_token(out)))
            out, cache = self.decode(np.array([tokens[-1]]), cache)
        return np.array(tokens, dtype=np.int64)

    # ---- the steps a mutant may override -----------------------------------------------------
    def next_token(self, logits: np.ndarray) -> int:
        """The argmax after the last position of a chunk's logits [T, V]."""
        return int(np.argmax(logits[-1]))

    def stage(self, stage: str, value: np.ndarray) -> np.ndarray:
        """A stage's output as the model goes on with it (rounded at its precision), recorded when tracing."""
        if self._rounding is not None and np.issubdtype(value.dtype, np.floating):  # indices are not rounded
            round_, stages, _ = self._rounding
            if stages is None or stage.rsplit(".", 1)[-1] in stages:
                value = round_(value)
        if self._trace is not None:
            self._trace[stage] = value
        return value

    def positions(self, B: int, T: int, past: int, mask: np.ndarray | None) -> np.ndarray:
        if mask is not None:
            return np.maximum(np.cumsum(mask, axis=1) - 1, 0)
        return np.broadcast_to(np.arange(past, past + T), (B, T))

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.gpt2:
            return self.w["transformer.wte.weight"][tokens] + self.w["transformer.wpe.weight"][positions]
        x = self.w["model.embed_tokens.weight"][tokens]
        return x * self.normaliser() if self.c.embed_scale else x

    def normaliser(self) -> np.ndarray:
        """Gemma's embedding multiplier sqrt(d_model), rounded to the model's dtype as transformers
        does (`embed_scale.to(weight.dtype)`: 45.25 for d_model 2048 in bfloat16, not 45.2548)."""
        value = np.asarray(np.sqrt(self.c.d_model), self.dtype)
        if self.precision in ("bfloat16", "float16"):
            value = ROUNDING[self.precision][0](value)
        return value

    def layer_norm(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.c.norm_eps) * gain + bias

    def rms_norm(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.c.norm_eps) * self.norm_gain(gain)

    def norm_gain(self, gain: np.ndarray) -> np.ndarray:
        """What an RMSNorm multiplies by: its weight, or Gemma's 1 + weight (gains stored around 0)."""
        return 1 + gain if self.c.norm_plus_one else gain

    def norm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        if self.gpt2:
            return self.layer_norm(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"])
        return self.rms_norm(x, self.w[prefix + ".weight"])

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1 + np.tanh(self.dtype(np.sqrt(2 / np.pi)) * (x + 0.044715 * x * x * x)))

    def gate_act(self, gate: np.ndarray) -> np.ndarray:
        """The gated MLP's activation: SiLU (SwiGLU) or the tanh GELU (Gemma's GeGLU)."""
        return self.gelu(gate) if self.c.mlp_act == "gelu_tanh" else self.silu(gate)

    def silu(self, x: np.ndarray) -> np.ndarray:
        return x / (1 + np.exp(-np.clip(x, -80, 80)))

    def softmax(self, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """nn.Linear: x @ W.T (+ b where the layer has a bias); Conv1D: x @ W + b (GPT-2)."""
        if self.gpt2:
            return x @ self.w[name + ".weight"] + self.w[name + ".bias"]
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a @ b

    def heads(self, x: np.ndarray, n: int) -> np.ndarray:
        B, T, _ = x.shape
        return x.reshape(B, T, n, -1).transpose(0, 2, 1, 3)

    def qkv(self, h: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = self.c
        if self.gpt2:
            q, k, v = np.split(self.linear(h, f"transformer.h.{i}.attn.c_attn"), 3, axis=-1)
            return self.heads(q, c.n_heads), self.heads(k, c.n_heads), self.heads(v, c.n_heads)
        p = f"model.layers.{i}.self_attn."
        if c.fused_qkv:
            q, k, v = self.qkv_split(self.linear(h, p + "qkv_proj"))
        else:
            q, k, v = (self.linear(h, p + name) for name in ("q_proj", "k_proj", "v_proj"))
        return self.heads(q, c.n_heads), self.heads(k, c.n_kv_heads), self.heads(v, c.n_kv_heads)

    def qkv_split(self, qkv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Phi-3's fused qkv_proj output [B, T, (n_heads + 2 n_kv_heads) d_head]: q's rows, then k's, then v's."""
        q_end = self.c.n_heads * self.c.d_head
        k_end = q_end + self.c.n_kv_heads * self.c.d_head
        return qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]

    def rotary_dims(self) -> int:
        """r, the dimensions of each head RoPE rotates (the first r; partial rotary: rotary_dim < d_head)."""
        return self.c.rotated_dims

    def inv_freq(self) -> np.ndarray:
        d = self.rotary_dims()
        return self.scaled(self.c.rope_theta ** (-np.arange(0, d, 2) / d))

    def scaled(self, inv_freq: np.ndarray) -> np.ndarray:
        """RoPE scaling: "linear" divides every frequency by the factor; "llama3" keeps wavelengths
        below original_n_ctx / high_freq_factor, divides those above original_n_ctx / low_freq_factor,
        and blends between (Llama 3.1's `apply_scaling`)."""
        s = self.c.rope_scaling
        if s is None:
            return inv_freq
        if s.kind == "linear":
            return inv_freq / s.factor
        wavelength = 2 * np.pi / inv_freq
        ratio = s.original_n_ctx / wavelength  # how many wavelengths fit in the original context
        blend = np.clip((ratio - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor), 0.0, 1.0)
        return (1 - blend) * inv_freq / s.factor + blend * inv_freq

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Rotate each head's first r dims (`rotary_dims`) and pass the rest: x [B, heads, T, d_head],
        positions [B, T]. Pair i (frequency i) is (i, i + r/2), or (2i, 2i + 1) with interleaved pairs."""
        angles = positions[:, None, :, None] * self.inv_freq()
        cos, sin = np.cos(angles).astype(self.dtype), np.sin(angles).astype(self.dtype)
        r = self.rotary_dims()
        rotated, passed = x[..., :r], x[..., r:]
        if self.interleaved():
            x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
            out = np.empty_like(rotated)
            out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        else:
            x1, x2 = rotated[..., : r // 2], rotated[..., r // 2 :]
            out = np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        return np.concatenate([out, passed], axis=-1)

    def interleaved(self) -> bool:
        """Whether RoPE pairs adjacent dims (2i, 2i + 1) (GLM) rather than (i, i + r/2)."""
        return self.c.rope_pairs == "interleaved"

    def rope_qkv(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray):
        """RoPE on q and k (never v)."""
        return self.rope(q, positions), self.rope(k, positions), v

    def normed_and_rotated(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray, i: int):
        """Qwen3's q/k norm (where the config has it), then RoPE (but on SmolLM3's NoPE layers)."""
        if self.c.qk_norm:
            q, k = self.qk_norm(q, k, i)
        return self.rope_qkv(q, k, v, positions) if self.rotates(i) else (q, k, v)

    def rotates(self, i: int) -> bool:
        """Whether layer i applies RoPE: every layer but those `nope_layers` names."""
        return i not in self.c.nope_layers

    def qk_norm(self, q: np.ndarray, k: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Qwen3: a plain RMSNorm over each head's d_head entries of q and of k, before RoPE; OLMo 2's
        over all heads of the projection at once (`qk_norm_span`)."""
        p = f"model.layers.{i}.self_attn."
        q = self.stage(f"layers.{i}.q_norm", self.qk_norm_span(q, self.w[p + "q_norm.weight"]))
        k = self.stage(f"layers.{i}.k_norm", self.qk_norm_span(k, self.w[p + "k_norm.weight"]))
        return q, k

    def qk_norm_span(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        """x [B, heads, T, d_head] normed over each head, or (qk_norm_whole) over its heads together."""
        if not self.c.qk_norm_whole:
            return self.rms_plain(x, gain)
        B, H, T, dh = x.shape
        whole = self.rms_plain(x.transpose(0, 2, 1, 3).reshape(B, T, H * dh), gain)
        return whole.reshape(B, T, H, dh).transpose(0, 2, 1, 3)

    def rms_plain(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.c.norm_eps) * gain

    def append(self, past: tuple[np.ndarray, np.ndarray] | None, k: np.ndarray, v: np.ndarray):
        """This layer's cache entry: the past keys and values followed by the chunk's."""
        if past is None:
            return k, v
        return np.concatenate([past[0], k], axis=2), np.concatenate([past[1], v], axis=2)

    def attended(self, past, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values the chunk attends to: the whole updated cache entry."""
        return k, v

    def kv_for_head(self, k: np.ndarray) -> np.ndarray:
        """[B, kv_heads, S, d_head] -> [B, n_heads, S, d_head]: query head j reads kv head j // group."""
        return np.repeat(k, self.c.n_heads // self.c.n_kv_heads, axis=1)

    def scale(self) -> float:
        """What q k^T is multiplied by: 1/sqrt(d_head), or 1/sqrt(query_pre_attn_scalar) (Gemma 2)."""
        return 1 / np.sqrt(self.c.query_scale if self.c.query_scale is not None else self.c.d_head)

    def allowed(self, T: int, S: int) -> np.ndarray:
        return np.arange(S)[None, :] <= np.arange(S - T, S)[:, None]

    def window(self, i: int) -> int | None:
        """Layer i's sliding window W, or None for a layer that sees every earlier key."""
        return self.c.window(i)

    def in_window(self, T: int, S: int, W: int, past: object) -> np.ndarray:
        """[T, S]: the query at t (its index among the S keys) sees keys t - W + 1 .. t, not t - W."""
        return np.arange(S)[None, :] > np.arange(S - T, S)[:, None] - W

    def cap(self, x: np.ndarray, cap: float | None) -> np.ndarray:
        """Soft-capping: cap * tanh(x / cap), or x where there is no cap."""
        return x if cap is None else np.tanh(x / self.dtype(cap)) * self.dtype(cap)

    def capped_scores(self, scores: np.ndarray, i: int) -> np.ndarray:
        """Layer i's scaled scores soft-capped (Gemma 2), before the mask."""
        return self.cap(scores, self.c.attn_softcap)

    def attend(self, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        return self.softmax(np.where(allowed, scores, -np.inf))

    def attention(self, h, i, positions, past, mask):
        q, k, v = self.qkv(h, i)
        q, k, v = (self.stage(f"layers.{i}.{name}", x) for name, x in (("q", q), ("k", k), ("v", v)))
        if not self.gpt2:
            q, k, v = self.normed_and_rotated(q, k, v, positions, i)
            q, k = self.stage(f"layers.{i}.q_rope", q), self.stage(f"layers.{i}.k_rope", k)
        k, v = self.append(past, k, v)
        k_att, v_att = self.attended(past, k, v)
        T, S = q.shape[2], k_att.shape[2]
        scores = self.matmul(q, self.kv_for_head(k_att).swapaxes(-1, -2)) * self.dtype(self.scale())
        scores = self.stage(f"layers.{i}.scores", self.capped_scores(scores, i))
        allowed = self.allowed(T, S)
        W = None if self.gpt2 else self.window(i)
        if W is not None:
            allowed = allowed & self.in_window(T, S, W, past)
        allowed = allowed[None, None]
        if mask is not None:
            allowed = allowed & (mask[:, None, None, :] | np.eye(T, dtype=bool))
        probs = self.stage(f"layers.{i}.probs", self.attend(scores, allowed))
        out = self.matmul(probs, self.kv_for_head(v_att))
        B, H, _, dh = out.shape
        attn = self.stage(f"layers.{i}.attn", out.transpose(0, 2, 1, 3).reshape(B, T, H * dh))
        name = f"transformer.h.{i}.attn.c_proj" if self.gpt2 else f"model.layers.{i}.self_attn.o_proj"
        return self.linear(attn, name), (k, v)

    def mlp(self, h: np.ndarray, i: int) -> np.ndarray:
        if self.gpt2:
            up = self.stage(f"layers.{i}.mlp_up", self.linear(h, f"transformer.h.{i}.mlp.c_fc"))
            act = self.stage(f"layers.{i}.mlp_act", self.gelu(up))
            return self.linear(act, f"transformer.h.{i}.mlp.c_proj")
        if self.c.is_moe_layer(i):
            return self.moe(h, i)
        p = f"model.layers.{i}.mlp."
        if self.c.fused_gate_up:
            gate, up = self.gate_up_split(self.linear(h, p + "gate_up_proj"))
        else:
            gate, up = self.linear(h, p + "gate_proj"), self.linear(h, p + "up_proj")
        gate, up = self.stage(f"layers.{i}.mlp_gate", gate), self.stage(f"layers.{i}.mlp_up", up)
        act = self.stage(f"layers.{i}.mlp_act", self.gate_act(gate) * up)
        return self.linear(act, p + "down_proj")

    def gate_up_split(self, gate_up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fused gate_up_proj output [B, T, 2 d_ff]: the gate's half first (`x.chunk(2, -1)`)."""
        half = gate_up.shape[-1] // 2
        return gate_up[..., :half], gate_up[..., half:]

    # ---- mixture of experts ------------------------------------------------------------------------
    def moe_names(self, i: int) -> tuple[str, list[tuple[str, str, str]]]:
        """Layer i's router weight name, and each expert's (gate, up, down) names as published."""
        if self.c.family == "mixtral":
            m = f"model.layers.{i}.block_sparse_moe."
            return m + "gate", [(f"{m}experts.{e}.w1", f"{m}experts.{e}.w3", f"{m}experts.{e}.w2")
                                for e in range(self.c.n_experts)]  # fmt: skip
        m = f"model.layers.{i}.mlp."
        x = [(f"{m}experts.{e}.gate_proj", f"{m}experts.{e}.up_proj", f"{m}experts.{e}.down_proj")
             for e in range(self.c.n_experts)]  # fmt: skip
        return m + "gate", x

    def expert(self, h: np.ndarray, names: tuple[str, str, str]) -> np.ndarray:
        """One gated MLP on rows h [N, d_model]."""
        gate, up, down = names
        return self.linear(self.gate_act(self.linear(h, gate)) * self.linear(h, up), down)

    def router_probs(self, logits: np.ndarray) -> np.ndarray:
        """softmax over the experts of each token's router logits [N, n_experts]."""
        return self.softmax(logits)

    def top_k(self) -> int:
        return self.c.top_k

    def route(self, logits: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each token's top_k experts by probability [N, top_k] and their weights [N, top_k]: the
        probabilities (of the router's `logits` [N, n_experts]), renormalised to sum 1 where the
        config says (`norm_topk`)."""
        chosen = np.argsort(-probs, axis=-1, kind="stable")[:, : self.top_k()]
        weights = np.take_along_axis(probs, chosen, axis=-1)
        return chosen, self.renormalised(weights)

    def renormalised(self, weights: np.ndarray) -> np.ndarray:
        return weights / weights.sum(-1, keepdims=True) if self.c.norm_topk else weights

    def shared_gate(self, h: np.ndarray, i: int) -> np.ndarray:
        """Qwen2-MoE's shared expert weight per token [N, 1]: sigmoid(h w_s^T)."""
        return 1 / (1 + np.exp(-self.linear(h, f"model.layers.{i}.mlp.shared_expert_gate")))

    def moe(self, h: np.ndarray, i: int) -> np.ndarray:
        """The routed sum of each token's top_k experts (+ the gated shared expert): h [B, T, d_model]."""
        B, T, d = h.shape
        rows = h.reshape(B * T, d)
        router, experts = self.moe_names(i)
        logits = self.linear(rows, router)
        probs = self.router_probs(logits)
        # traced as the format holds it; the choice is made on the unrounded probabilities, as
        # transformers takes its softmax in float32 whatever the model's dtype
        self.stage(f"layers.{i}.router_probs", probs.reshape(B, T, -1))
        chosen, weights = self.route(logits, probs)
        self.stage(f"layers.{i}.experts", chosen.reshape(B, T, -1))  # the experts it uses, right or wrong
        out = np.zeros_like(rows)
        for e, names in enumerate(experts):
            token, slot = np.nonzero(chosen == e)
            if token.size:
                out[token] += self.expert(rows[token], names) * weights[token, slot, None]
        if self.c.d_shared_expert is not None:
            s = f"model.layers.{i}.mlp.shared_expert."
            shared = self.expert(rows, (s + "gate_proj", s + "up_proj", s + "down_proj"))
            out = out + self.shared_gate(rows, i) * shared
        return out.reshape(B, T, d)

    def norm_names(self, i: int) -> tuple[str, str]:
        """The weight prefixes of layer i's norm before attention and before the MLP (Gemma 2's
        `post_attention_layernorm` follows attention; its pre-MLP norm is `pre_feedforward_layernorm`)."""
        p = f"transformer.h.{i}." if self.gpt2 else f"model.layers.{i}."
        if self.gpt2:
            return p + "ln_1", p + "ln_2"
        return p + "input_layernorm", p + (
            "pre_feedforward_layernorm" if self.c.sandwich_norm else "post_attention_layernorm"
        )

    def sandwich(self, branch: np.ndarray, i: int, which: str) -> np.ndarray:
        """Gemma 2: the attention branch's and the MLP branch's output normed before the residual sum."""
        if not self.c.sandwich_norm:
            return branch
        name = "post_attention_layernorm" if which == "attn" else "post_feedforward_layernorm"
        return self.stage(f"layers.{i}.{which}_post_norm", self.norm(branch, f"model.layers.{i}.{name}"))

    def residual(self, x: np.ndarray, branch: np.ndarray, which: str) -> np.ndarray:
        """The residual stream after the `which` ("attn" or "mlp") branch: x + branch."""
        return x + branch

    def pre_norm(self, x: np.ndarray, i: int, which: str) -> np.ndarray:
        """The `which` ("attn" or "mlp") sublayer's input: x normed (`norm_names`), or x itself (OLMo 2)."""
        if not self.c.pre_norm:
            return x
        name = self.norm_names(i)[0 if which == "attn" else 1]
        return self.stage(f"layers.{i}.{which}_norm", self.norm(x, name))

    def block(self, x, i, positions, past, mask):
        h = self.pre_norm(x, i, "attn")
        a, kv = self.attention(h, i, positions, past, mask)
        a = self.sandwich(self.stage(f"layers.{i}.attn_out", a), i, "attn")
        x = self.stage(f"layers.{i}.resid_attn", self.residual(x, a, "attn"))
        h = self.pre_norm(x, i, "mlp")
        m = self.sandwich(self.stage(f"layers.{i}.mlp_out", self.mlp(h, i)), i, "mlp")
        x = self.stage(f"layers.{i}.resid_mlp", self.residual(x, m, "mlp"))
        return x, kv

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return self.norm(x, "transformer.ln_f" if self.gpt2 else "model.norm")

    def classifier(self) -> np.ndarray:
        if self.c.tie_embeddings:
            return self.w["transformer.wte.weight" if self.gpt2 else "model.embed_tokens.weight"]
        return self.w["lm_head.weight"]

    def past_length(self, cache: Cache | None) -> int:
        return 0 if cache is None else cache[0][0].shape[2]

    def forward(self, tokens: np.ndarray, cache: Cache | None, mask: np.ndarray | None) -> tuple[np.ndarray, Cache]:
        B, T = tokens.shape
        positions = self.positions(B, T, self.past_length(cache), mask)
        x = self.stage("embed", self.embed(tokens, positions))
        new_cache = []
        for i in range(self.c.n_layers):
            x, kv = self.block(x, i, positions, None if cache is None else cache[i], mask)
            new_cache.append(kv)
        x = self.stage("final_norm", self.final_norm(x))
        logits = self.stage("logits", self.final_cap(self.matmul(x, self.classifier().T)))
        return logits, tuple(new_cache)

    def final_cap(self, logits: np.ndarray) -> np.ndarray:
        """Gemma 2's final soft-cap on the logits (none elsewhere)."""
        return self.cap(logits, self.c.final_softcap)


def factory(
    cls: type[Transformer], precision: str = "float32", *, declared: str | None = None
) -> Callable[[Any, dict[str, np.ndarray]], Transformer]:
    """A plug-in factory `build(config, weights)` for the implementation `cls` computing at
    `precision`; with `declared`, it declares that class instead (a float32 computation judged by
    a coarser class's bounds measures how large a bug's effect is against them)."""

    def build(config: Any, weights: dict[str, np.ndarray]) -> Transformer:
        model = cls(config, weights, precision)
        model.precision = declared or precision
        return model

    suffix = "" if precision == "float32" else f"_{precision}"
    build.__name__ = build.__qualname__ = f"build_{cls.__name__}{suffix}" + (f"_as_{declared}" if declared else "")
    build.__doc__ = cls.__doc__
    return build
