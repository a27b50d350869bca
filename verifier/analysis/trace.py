"""The life of a tensor: each stage of one forward pass, its shape, the weights it meets, its values.

`life_of_a_tensor` runs the NumPy reference on one sequence of T tokens and returns a `Life`:
the stages in compute order (names and shapes from `verifier.model.stages`, the weights each meets from
`stages.stage_weights`), for RoPE models the cos/sin tables and what the rotation does, the KV
cache growing by one row per decoded token (`NumpyModel.decode`), and the predicted next token.
With `pad`, shapes are those of the sequence padded to `pad` positions, and the padded run is
checked to leave the real positions' logits unchanged (the causal mask hides the padding).
`render` prints a `Life` as a table; `to_json` gives it to machines; `verifier.analysis.trace_plot` draws it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from verifier.analysis import tolerance
from verifier.formats.tokenizer import Tokenizer
from verifier.messages import BoundedMessage
from verifier.model import stages
from verifier.model.config import ModelConfig, describe
from verifier.model.weights import WeightMap, weight_shapes
from verifier.reference import NumpyModel, llama
from verifier.reference.layers import rope_tables

Layers = Literal["all", "first"]
N_VALUES = 3  # leading values shown per stage
CACHE_STEPS = 8  # tokens decoded one at a time; the rest of a longer sequence is decoded as one chunk

_EMBED_OPS = {"gpt2": "token + position embedding", "llama": "token embedding (positions: RoPE)"}
_FINAL_NORM_OPS = {"gpt2": "LayerNorm (ln_f)", "llama": "RMSNorm (norm)"}
_LAYER_OPS = {
    "gpt2": {
        "attn_norm": "LayerNorm (ln_1)",
        "q": "h @ W_q + b_q, split into heads",
        "k": "h @ W_k + b_k, split into heads",
        "v": "h @ W_v + b_v, split into heads",
        "scores": "q k^T / sqrt(d_head)",
        "probs": "causal mask, softmax over keys",
        "attn": "probs @ v, heads merged",
        "attn_out": "output projection",
        "resid_attn": "x + attention",
        "mlp_norm": "LayerNorm (ln_2)",
        "mlp_up": "h @ W_fc + b_fc",
        "mlp_act": "GELU (tanh form)",
        "mlp_out": "@ W_proj + b_proj",
        "resid_mlp": "x + MLP",
    },
    "llama": {
        "attn_norm": "RMSNorm: x / rms(x) * g",
        "q": "h @ W_q^T, split into heads",
        "k": "h @ W_k^T, split into kv heads",
        "v": "h @ W_v^T, split into kv heads",
        "q_rope": "RoPE: rotate pairs (i, i + d_head/2)",
        "k_rope": "RoPE: rotate pairs (i, i + d_head/2)",
        "scores": "q k^T / sqrt(d_head)",
        "probs": "causal mask, softmax over keys",
        "attn": "probs @ v, heads merged",
        "attn_out": "output projection (o_proj)",
        "resid_attn": "x + attention",
        "mlp_norm": "RMSNorm: x / rms(x) * g",
        "mlp_gate": "h @ W_gate^T (llama2.c w1)",
        "mlp_up": "h @ W_up^T (llama2.c w3)",
        "mlp_act": "silu(gate) * up (SwiGLU)",
        "mlp_out": "@ W_down^T (llama2.c w2)",
        "resid_mlp": "x + MLP",
        "attn_post_norm": "RMSNorm: x / rms(x) * g",
        "mlp_post_norm": "RMSNorm: x / rms(x) * g",
        "router_probs": "router: softmax(h @ W_r^T) over experts",
    },
}
_PER_HEAD = frozenset({"q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope", "scores", "probs"})


def _layout(config: ModelConfig) -> str:
    """The key of the tables above: "gpt2", or "llama" for every family of the Llama layout."""
    return "gpt2" if config.family == "gpt2" else "llama"


def _llama_operation(config: ModelConfig, layer: int, op: str) -> str:
    """What op does in a Llama-layout layer, with the pieces the config's switches add."""
    c, text = config, _LAYER_OPS["llama"].get(op, "")  # q_norm, k_norm: below
    if op in ("attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm") and c.norm_plus_one:
        text = "RMSNorm: x / rms(x) * (1 + g)"
    if op in ("q", "k", "v") and c.qkv_bias:
        text = text.replace("^T,", f"^T + b_{op},")
    if op == "attn_out" and c.o_bias:
        text += " + b_o"
    if op in ("q_norm", "k_norm"):
        text = f"RMSNorm of each head's {op[0]}: / rms * g (before RoPE)"
    if op in ("attn_post_norm", "mlp_post_norm"):
        text += f" of the {'attention' if op == 'attn_post_norm' else 'MLP'} output"
    if op == "scores":
        text = f"q k^T / sqrt({c.query_scale})" if c.query_scale is not None else text
        text += f", capped: {c.attn_softcap:g} tanh(s / {c.attn_softcap:g})" if c.attn_softcap is not None else ""
    if op == "probs" and c.window(layer) is not None:
        text = f"sliding window ({c.window(layer)} keys), softmax over keys"
    if op == "mlp_act" and c.mlp_act == "gelu_tanh":
        text = "gelu_tanh(gate) * up (GeGLU)"
    if op in ("q", "k", "v") and c.fused_qkv:
        text += " (rows of the fused qkv_proj)"
    if op in ("mlp_gate", "mlp_up") and c.fused_gate_up:
        text = f"h @ W_{op[4:]}^T ({'first' if op == 'mlp_gate' else 'second'} half of the fused gate_up_proj)"
    if op in ("q_rope", "k_rope") and (c.rotary_dim is not None or c.rope_pairs == "interleaved"):
        r = c.rotated_dims
        text = "RoPE: rotate pairs " + ("(2i, 2i + 1)" if c.rope_pairs == "interleaved" else f"(i, i + {r // 2})")
        text += f" of the first {r} dims, the other {c.d_head - r} pass" if r < c.d_head else ""
    if op == "experts":
        text = f"the {c.top_k} of {c.n_experts} experts each token uses: its top-{c.top_k} router probabilities"
    if op == "mlp_out" and c.is_moe_layer(layer):
        weighting = "renormalised" if c.norm_topk else "probability"
        text = f"top-{c.top_k} of {c.n_experts} experts' SwiGLU, {weighting}-weighted sum"
        text += " + sigmoid-gated shared expert" if c.d_shared_expert is not None else ""
    return text


class TraceError(BoundedMessage, ValueError):
    """Arguments a trace cannot be made from (tokens, padding, plot file); the message says why."""


@dataclass(frozen=True)
class WeightUse:
    """A weight a stage meets: canonical name, shape, and the part used ("" and `shape`: all of it)."""

    name: str
    shape: tuple[int, ...]
    part: str
    part_shape: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One stage: its name in `verifier.model.stages`, what computes it, its shape, weights and values.

    `values` are the leading entries of the last position's row (of the first head, for per-head
    stages), the row every other position's information flows into.
    """

    stage: str
    operation: str
    shape: tuple[int, ...]
    weights: tuple[WeightUse, ...]
    values: tuple[float, ...]

    @property
    def per_head(self) -> bool:
        return stages.split_stage(self.stage)[1] in _PER_HEAD


@dataclass(frozen=True)
class RopeView:
    """RoPE's tables and what the rotation does to layer 0's q and k.

    `cos`, `sin`: leading entries at the last position of the [T, d_head/2] tables.
    `length_change`: max | |rotated head vector| - |head vector| | (a rotation keeps lengths).
    `position0_change`: max |rotated - unrotated| at position 0 (rotation by angle 0).
    """

    theta: float
    table_shape: tuple[int, int]
    cos: tuple[float, ...]
    sin: tuple[float, ...]
    length_change: float
    position0_change: float


@dataclass(frozen=True)
class CacheStep:
    """One `decode` call: the tokens it took from position `start` on, the cache shape after it,
    [n_layers, 2, B, S, n_kv_heads, d_head], and max |its logits - the full pass's logits there|."""

    start: int
    tokens: tuple[int, ...]
    cache_shape: tuple[int, ...]
    max_diff: float


@dataclass(frozen=True)
class Prediction:
    """The argmax of the last position's logits [vocab_size], and the last row it came from."""

    token: int
    piece: str | None
    logit: float
    last_row: tuple[float, ...]


@dataclass(frozen=True)
class Padding:
    """The sequence padded with `pad_token` to `length`: max |logit change| at the real positions,
    the float32 tolerance for those logits (`verifier.analysis.tolerance`), and whether the next token is the same.

    `last_row_diff` and `last_row_token` are the padded input's last row (position `length - 1`, a
    padding position when `length` exceeds the tokens) against the next token's logits and argmax
    `next_token`: what "extract the last row" of a padded input would give.
    """

    length: int
    pad_token: int
    max_diff: float
    bound: float
    same_prediction: bool
    next_token: int
    last_row_diff: float
    last_row_token: int

    @property
    def harmless(self) -> bool:
        return self.max_diff <= self.bound and self.same_prediction


@dataclass(frozen=True)
class Life:
    """The life of a tensor through one model; see the module docstring."""

    model: str
    config: ModelConfig
    weights_source: str
    tokens: tuple[int, ...]
    pieces: tuple[str, ...] | None
    tokenizer: str | None
    layers_shown: int
    steps: tuple[Step, ...]
    rope: RopeView | None
    cache: tuple[CacheStep, ...]
    prediction: Prediction
    padding: Padding | None

    @property
    def n_positions(self) -> int:
        """T, the number of positions the shapes describe (the padded length with padding)."""
        return self.padding.length if self.padding else len(self.tokens)


def _leading(array: np.ndarray) -> tuple[float, ...]:
    """The first N_VALUES entries of the last position's row: [T, n] -> row -1; [heads, T, n] -> head 0."""
    row = array[0, -1] if array.ndim == 3 else array[-1] if array.ndim == 2 else array
    return tuple(float(v) for v in row[:N_VALUES])


def _operation(config: ModelConfig, stage: str) -> str:
    layer, op = stages.split_stage(stage)
    if layer is not None:
        text = _LAYER_OPS["gpt2"][op] if config.family == "gpt2" else _llama_operation(config, layer, op)
        group = config.n_heads // config.n_kv_heads
        if op == "scores" and group > 1:
            text += f", each kv head shared by {group} query heads"
        return text
    if stage == stages.EMBED:
        text = _EMBED_OPS[_layout(config)]
        return text.replace("embedding", "embedding * sqrt(d_model)", 1) if config.embed_scale else text
    if stage == stages.FINAL_NORM:
        return "RMSNorm (norm): x / rms(x) * (1 + g)" if config.norm_plus_one else _FINAL_NORM_OPS[_layout(config)]
    text = "h @ embedding^T (tied classifier)" if config.tie_embeddings else "h @ classifier^T"
    cap = config.final_softcap
    return text if cap is None else f"{text}, capped: {cap:g} tanh(x / {cap:g})"


def _weight_uses(config: ModelConfig, stage: str) -> tuple[WeightUse, ...]:
    shapes = weight_shapes(config)
    op = stages.split_stage(stage)[1]
    uses = []
    for name in stages.stage_weights(config, stage):
        shape = shapes[name]
        if ".c_attn." in name:
            # GPT-2 fuses q, k, v into one Conv1D: each reads its third of the output columns.
            d = config.d_model
            start = "qkv".index(op) * d
            cols = f"{start}:{start + d}"
            part, part_shape = (f"[:, {cols}]", (d, d)) if len(shape) == 2 else (f"[{cols}]", (d,))
            uses.append(WeightUse(name, shape, part, part_shape))
        else:
            uses.append(WeightUse(name, shape, "", shape))
    return tuple(uses)


def _rope_view(config: ModelConfig, trace: dict[str, np.ndarray], T: int) -> RopeView:
    r = config.rotated_dims
    cos, sin = rope_tables(np.arange(T), r, config.rope_theta, llama.inv_freq(config))  # [T, r/2]
    # What RoPE rotates: q and k as projected, or as normalised where a q/k norm comes first.
    before = {x: stages.layer_stage(0, f"{x}_norm" if config.qk_norm else x) for x in ("q", "k")}
    length_change = max(
        float(np.abs(np.linalg.norm(trace[stages.layer_stage(0, f"{x}_rope")], axis=-1)
                     - np.linalg.norm(trace[before[x]], axis=-1)).max())
        for x in ("q", "k")
    )  # fmt: skip
    position0_change = max(
        float(np.abs(trace[stages.layer_stage(0, f"{x}_rope")][:, 0] - trace[before[x]][:, 0]).max())
        for x in ("q", "k")
    )
    return RopeView(config.rope_theta, cos.shape, _leading(cos), _leading(sin), length_change, position0_change)


def _cache_growth(model: NumpyModel, tokens: np.ndarray, full_logits: np.ndarray) -> tuple[CacheStep, ...]:
    """Decode the first CACHE_STEPS tokens one at a time, then the rest in one chunk."""
    cuts = [*range(min(len(tokens), CACHE_STEPS) + 1)] + ([len(tokens)] if len(tokens) > CACHE_STEPS else [])
    steps, cache = [], None
    for start, end in itertools.pairwise(cuts):
        logits, cache = model.decode(tokens[start:end], cache)
        diff = float(np.abs(logits - full_logits[start:end]).max())
        steps.append(CacheStep(start, tuple(int(t) for t in tokens[start:end]), cache.shape, diff))
    return tuple(steps)


def padding_effect(model: NumpyModel, tokens: np.ndarray, length: int) -> Padding:
    """Pad `tokens` [T] on the right to `length` with the model's end-of-text id and compare the real
    positions' logits [T, vocab_size] with the unpadded run's (the causal mask should hide the padding)."""
    config = model.config
    if not len(tokens) <= length <= config.n_ctx:
        raise TraceError(f"--pad must be between the {len(tokens)} tokens and n_ctx={config.n_ctx}, found {length}")
    pad_token = int(config.to_hf_dict()["eos_token_id"])
    padded = np.concatenate([tokens, np.full(length - len(tokens), pad_token, dtype=tokens.dtype)])
    logits, alone = model.logits(padded), model.logits(tokens)
    real, next_logits, last = logits[: len(tokens)], alone[-1], logits[-1]
    next_token = int(next_logits.argmax())
    return Padding(
        length=length,
        pad_token=pad_token,
        max_diff=float(np.abs(real - alone).max()),
        bound=tolerance.bound(alone),
        same_prediction=int(real[-1].argmax()) == next_token,
        next_token=next_token,
        last_row_diff=float(np.abs(last - next_logits).max()),
        last_row_token=int(last.argmax()),
    )


def life_of_a_tensor(
    model_name: str,
    config: ModelConfig,
    weights: WeightMap,
    tokens: Sequence[int],
    *,
    weights_source: str,
    tokenizer: Tokenizer | None = None,
    layers: Layers = "first",
    pad: int | None = None,
) -> Life:
    """Trace `tokens` through the float32 reference holding `weights`; see the module docstring.

    `layers` "first" keeps the first layer's stages (the others repeat them), "all" keeps every layer's.
    """
    ids = np.asarray(tokens, dtype=np.int64)
    model = NumpyModel(config, weights)
    padding = padding_effect(model, ids, pad) if pad is not None else None  # first: it checks `pad`
    trace = model.trace(ids)
    T = len(ids)
    shapes = stages.stage_shapes(config, pad or T)
    layers_shown = config.n_layers if layers == "all" else 1
    steps = tuple(
        Step(stage, _operation(config, stage), shape, _weight_uses(config, stage), _leading(trace[stage]))
        for stage, shape in shapes.items()
        if (stages.split_stage(stage)[0] or 0) < layers_shown
    )
    logits = trace[stages.LOGITS]  # [T, vocab_size]
    token = int(logits[-1].argmax())
    piece = tokenizer.piece(token) if tokenizer else None
    prediction = Prediction(token, piece, float(logits[-1, token]), _leading(trace[stages.FINAL_NORM]))
    return Life(
        model=model_name,
        config=config,
        weights_source=weights_source,
        tokens=tuple(int(t) for t in ids),
        pieces=tuple(tokenizer.piece(int(t)) for t in ids) if tokenizer else None,
        tokenizer=tokenizer.source if tokenizer else None,
        layers_shown=layers_shown,
        steps=steps,
        rope=_rope_view(config, trace, T) if config.uses_rope else None,
        cache=_cache_growth(model, ids, logits),
        prediction=prediction,
        padding=padding,
    )


# ---- rendering ---------------------------------------------------------------------------------


def format_shape(shape: Sequence[int], per_head: bool = False) -> str:
    """`[5, 768]`; per-head shapes as the articles write them, `12 x [5, 64]`."""
    if per_head:
        return f"{shape[0]} x [{', '.join(map(str, shape[1:]))}]"
    return f"[{', '.join(map(str, shape))}]"


def _values(values: Sequence[float]) -> str:
    return " ".join(f"{v:.3g}" for v in values) + " ..."


def short_weight_name(name: str, config: ModelConfig) -> str:
    """A weight name relative to its layer (`attn.c_attn.weight`) or to the model (`wte.weight`)."""
    if name.startswith(_layer_prefix(config)):
        return name.split(".", 3)[3]
    return name.removeprefix(_MODEL_PREFIX[_layout(config)])


def _weights_cell(step: Step, config: ModelConfig) -> str:
    """`c_attn.weight[:, 0:768] [768, 768] + bias`: each weight and the shape of the part used."""
    cells: list[str] = []
    for w in step.weights:
        if w.name.endswith(".bias") and cells:
            cells.append("bias")  # its shape is the output's last dimension
        else:
            cells.append(f"{short_weight_name(w.name, config)}{w.part} {format_shape(w.part_shape)}")
    return " + ".join(cells)


Row = tuple[str, str, str, str, str]


def _table(rows: Sequence[Row | str]) -> list[str]:
    """Rows aligned in columns; a plain string is a banner line, printed as it is."""
    cells: list[Row] = [r for r in rows if not isinstance(r, str)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return [
        r if isinstance(r, str) else "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def render(life: Life) -> str:
    """The life as a terminal table: stage, shape, operation, weights met, leading values."""
    c, p, pred = life.config, life.padding, life.prediction
    last = len(life.tokens) - 1
    lines = [f"{life.model}: {describe(c)}", f"weights: {life.weights_source}", f"tokens: {list(life.tokens)}"]
    if life.pieces is not None:
        lines.append(f"  = {' '.join(map(repr, life.pieces))} (tokenizer: {life.tokenizer})")
    if p:
        lines.append(f"padded with token {p.pad_token} to {p.length} positions: the shapes are the padded run's;")
        lines.append(
            f"  the causal mask hides the padding: the real positions' logits move by {p.max_diff:.2g} "
            f"(float32 tolerance {p.bound:.2g}), the next token is {'the same' if p.same_prediction else 'DIFFERENT'}"
        )
        if p.length > len(life.tokens):
            lines.append(
                f"  the padded input's last row (position {p.length - 1}) is a padding position: its logits differ "
                f"from the next token's by up to {p.last_row_diff:.3g} and predict token {p.last_row_token}"
                + (" (the same by chance)" if p.last_row_token == p.next_token else f", not {p.next_token}")
            )
    lines.append(f"values: leading entries of position {last}'s row (head 0 for per-head stages)")
    lines.append(f"weights met: names after {_MODEL_PREFIX[_layout(c)]} (after {_layer_prefix(c)}<i>. in layer i)")
    rows: list[Row | str] = [
        ("stage", "shape", "operation", "weights met", "values"),
        ("tokens", format_shape([len(life.tokens)]), "token ids", "", ""),
    ]
    first_op, last_op = stages.layer_ops(c, 0)[0], stages.layer_ops(c, 0)[-1]  # the same in every layer
    for step in life.steps:
        layer, op = stages.split_stage(step.stage)
        if op == first_op:
            rows.append(f"layer {layer} of {c.n_layers} (weights {_layer_prefix(c)}{layer}.*)")
        label = step.stage if layer is None else f"  {op}"
        shape = format_shape(step.shape, step.per_head)
        rows.append((label, shape, step.operation, _weights_cell(step, c), _values(step.values)))
        if op == last_op and layer == life.layers_shown - 1 < c.n_layers - 1:
            rows.append(f"layers {layer + 1}-{c.n_layers - 1}: the same steps, {c.n_layers - 1 - layer} more times "
                        "(--layers all shows them)")  # fmt: skip
        if step.stage == stages.FINAL_NORM:
            rows.append(("last row", format_shape([c.d_model]), f"final_norm[{last}]", "", _values(pred.last_row)))
    piece = f" {pred.piece!r}" if pred.piece is not None else ""
    next_token = f"{pred.token}{piece} (logit {pred.logit:.3g})"
    rows.append(("next token", format_shape([c.vocab_size]), f"argmax of logits[{last}]", "", next_token))
    lines += ["", *_table(rows)]
    if life.rope:
        lines += ["", *_render_rope(life.rope, c)]
    lines += ["", *_render_cache(life.cache)]
    return "\n".join(lines)


_MODEL_PREFIX = {"gpt2": "transformer.", "llama": "model."}


def _layer_prefix(config: ModelConfig) -> str:
    return _MODEL_PREFIX[_layout(config)] + ("h." if config.family == "gpt2" else "layers.")


def _render_rope(rope: RopeView, c: ModelConfig) -> list[str]:
    last = rope.table_shape[0] - 1
    s = c.rope_scaling
    scaled = f", the frequencies scaled ({s.kind}, factor {s.factor:g})" if s is not None else ""
    r = c.rotated_dims
    pair = "(2i, 2i + 1)" if c.rope_pairs == "interleaved" else f"(i, i + {r // 2})"
    passing = f" (its last {c.d_head - r} dims pass unrotated)" if r < c.d_head else ""
    nope = f"; layers {', '.join(map(str, c.nope_layers))} apply none (NoPE)" if c.nope_layers else ""
    return [
        f"RoPE (theta {rope.theta:g}): cos, sin tables 2 x {format_shape(rope.table_shape)}; pair "
        f"{pair} of each head vector{passing} turns by position * theta^(-2i/{r}){scaled}{nope}",
        f"  cos at position {last}: {_values(rope.cos)}",
        f"  sin at position {last}: {_values(rope.sin)}",
        f"  the rotation keeps each q, k head vector's length (layer 0: max change {rope.length_change:.2g}) "
        f"and leaves position 0 as it is (max change {rope.position0_change:.2g})",
    ]


def _render_cache(cache: Sequence[CacheStep]) -> list[str]:
    rows: list[Row | str] = []
    for step in cache:
        end = step.start + len(step.tokens) - 1
        where, what = (
            (f"  position {step.start}", f"token {step.tokens[0]}")
            if len(step.tokens) == 1
            else (f"  positions {step.start}-{end}", f"{len(step.tokens)} tokens")
        )
        rows.append((
            where, what, f"cache {format_shape(step.cache_shape)}",
            f"logits = the full pass's rows {step.start}-{end} within {step.max_diff:.2g}"
            if len(step.tokens) > 1 else f"logits = the full pass's row {step.start} within {step.max_diff:.2g}",
            "",
        ))  # fmt: skip
    header = f"KV cache, one token per NumpyModel.decode call (after {CACHE_STEPS}, the rest in one call)"
    return [f"{header}; shape [n_layers, 2, B, S, n_kv_heads, d_head]:",
            *_table(rows)]  # fmt: skip


def to_json(life: Life) -> dict[str, Any]:
    """The life as plain JSON data."""
    data = asdict(life)
    data["config"] = life.config.to_dict()
    data["T"] = life.n_positions
    return data
