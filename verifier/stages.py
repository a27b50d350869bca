"""Stage names of the life of a tensor, and the shape each stage has.

A trace is a dict {stage name: array} for one sequence of T tokens. Names are `embed`,
`layers.{i}.{op}` for each layer i and op in `layer_ops(family)`, `final_norm` and `logits`.
Per-head tensors are [n_heads, T, d_head]; q and k are in the `transformers` (rotate-half)
layout of the head dimension. `scores` are the scaled dot products q k^T / sqrt(d_head); only
entries on or below the diagonal are defined (above it a model may hold anything).
"""

from __future__ import annotations

from verifier.config import Family, ModelConfig

EMBED = "embed"
FINAL_NORM = "final_norm"
LOGITS = "logits"

_GPT2_OPS = (
    "attn_norm", "q", "k", "v", "scores", "probs", "attn", "attn_out", "resid_attn",
    "mlp_norm", "mlp_up", "mlp_act", "mlp_out", "resid_mlp",
)  # fmt: skip
_LLAMA_OPS = (
    "attn_norm", "q", "k", "v", "q_rope", "k_rope", "scores", "probs", "attn", "attn_out", "resid_attn",
    "mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "mlp_out", "resid_mlp",
)  # fmt: skip

# Stages whose entries above the diagonal are undefined: compare them on the lower triangle.
CAUSAL_OPS = frozenset({"scores"})


def layer_ops(family: Family) -> tuple[str, ...]:
    """The per-layer ops of a family, in the order the forward pass computes them."""
    return _GPT2_OPS if family == "gpt2" else _LLAMA_OPS


def layer_stage(layer: int, op: str) -> str:
    """The stage name of `op` in layer `layer`, e.g. `layers.0.scores`."""
    return f"layers.{layer}.{op}"


def split_stage(stage: str) -> tuple[int | None, str]:
    """(layer, op) of a stage name; layer is None for `embed`, `final_norm`, `logits`."""
    if stage.startswith("layers."):
        _, layer, op = stage.split(".", 2)
        return int(layer), op
    return None, stage


def _op_shape(config: ModelConfig, op: str, T: int) -> tuple[int, ...]:
    if op in ("q", "q_rope"):
        return (config.n_heads, T, config.d_head)
    if op in ("k", "v", "k_rope"):
        return (config.n_kv_heads, T, config.d_head)
    if op in ("scores", "probs"):
        return (config.n_heads, T, T)
    if op in ("mlp_gate", "mlp_up", "mlp_act"):
        return (T, config.d_ff)
    return (T, config.d_model)


def stage_shapes(config: ModelConfig, T: int) -> dict[str, tuple[int, ...]]:
    """Every stage of a trace of T tokens and the shape its formula gives, in compute order."""
    shapes: dict[str, tuple[int, ...]] = {EMBED: (T, config.d_model)}
    for layer in range(config.n_layers):
        for op in layer_ops(config.family):
            shapes[layer_stage(layer, op)] = _op_shape(config, op, T)
    shapes[FINAL_NORM] = (T, config.d_model)
    shapes[LOGITS] = (T, config.vocab_size)
    return shapes
