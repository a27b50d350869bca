"""Exact parameter counts from a model's sizes alone, component by component.

The formula is written from the architecture, not from a weight set, so that the two can check
each other (and both against `transformers` on the meta device). It counts an `Architecture`: the
counting view of a `ModelConfig`, which a published `config.json` of every family reaches through
the suite's own config reader, so a model is counted exactly as the reference runs it.
Components follow the articles' grouping: embeddings, attention q/k/v, output projection, MLP,
norms, classifier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verifier.model.config import Family, ModelConfig
from verifier.model.config import from_hf_dict as config_from_hf_dict


@dataclass(frozen=True)
class Architecture:
    """What the formula needs to know about a model.

    `family` "gpt2" is GPT-2's layout; every other family is the Llama layout (RMSNorm, gated MLP,
    no position table). `qkv_bias`: q, k, v projections have biases (Qwen2; `attention_bias`);
    `o_bias`: the output projection too. `qk_norm`: an RMSNorm gain of d_head for q and one for k in
    each layer (Qwen3; `qk_norm_whole`: of n_heads d_head and n_kv_heads d_head, OLMo 2). `sandwich_norm`:
    two more RMSNorms per layer, after attention and after the MLP (Gemma 2); `pre_norm` False: without
    the two before them (OLMo 2). `n_experts` > 0: each of `moe_layers` layers' MLP is that many experts of size
    `d_expert` behind a router [n_experts, d_model], `experts_per_token` of them active (Mixtral,
    Qwen2-MoE), plus a shared expert of size `d_shared_expert` with its [1, d_model] gate where that is
    not 0; the other layers have one dense MLP of size d_ff. Fused q/k/v and gate/up (Phi-3, GLM)
    store the same parameters in fewer matrices. `stores_rope_tables`: the checkpoint also stores RoPE
    cos/sin tables (llama2.c's legacy format).
    """

    family: Family
    vocab_size: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    tie_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    qk_norm_whole: bool = False
    sandwich_norm: bool = False
    pre_norm: bool = True
    n_experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0
    d_expert: int = 0
    d_shared_expert: int = 0
    fused_qkv: bool = False
    fused_gate_up: bool = False
    stores_rope_tables: bool = False


def from_config(c: ModelConfig, *, stores_rope_tables: bool | None = None) -> Architecture:
    """The counting view of a config the reference runs. `stores_rope_tables` defaults to llama2.c's
    layout for the llama family (its checkpoints store the RoPE tables), False otherwise."""
    return Architecture(
        family=c.family,
        vocab_size=c.vocab_size,
        n_ctx=c.n_ctx,
        d_model=c.d_model,
        n_layers=c.n_layers,
        n_heads=c.n_heads,
        n_kv_heads=c.n_kv_heads,
        d_head=c.d_head,
        d_ff=c.d_ff,
        tie_embeddings=c.tie_embeddings,
        qkv_bias=c.qkv_bias,
        o_bias=c.o_bias,
        qk_norm=c.qk_norm,
        qk_norm_whole=c.qk_norm_whole,
        sandwich_norm=c.sandwich_norm,
        pre_norm=c.pre_norm,
        n_experts=c.n_experts,
        experts_per_token=c.top_k,
        moe_layers=sum(map(c.is_moe_layer, range(c.n_layers))),
        d_expert=c.expert_d_ff if c.n_experts else 0,
        d_shared_expert=c.d_shared_expert or 0,
        fused_qkv=c.fused_qkv,
        fused_gate_up=c.fused_gate_up,
        stores_rope_tables=c.family == "llama" if stores_rope_tables is None else stores_rope_tables,
    )


def from_hf_dict(fields: dict[str, Any]) -> Architecture:
    """The counting view of a `config.json` of one of the suite's families, read by the suite's own config
    reader (`verifier.model.config.from_hf_dict`), so a config is counted exactly as it is run; its
    ConfigError names the key that cannot be read. RoPE's parameters (its type and scaling, YaRN's and
    longrope's included, which the reference does not run) are left out: no rotation adds a parameter."""
    counted = {k: v for k, v in fields.items() if k not in ("rope_scaling", "rope_parameters")}
    return from_config(config_from_hf_dict(counted), stores_rope_tables=False)


@dataclass(frozen=True)
class ParamRow:
    """One component: its name, the shapes it is made of, and its parameter count."""

    component: str
    shape: str
    count: int


@dataclass(frozen=True)
class ParamTable:
    """The breakdown of a model's parameters.

    `total` counts learned parameters (a tied classifier once). `stored_rope` is the size of
    the RoPE cos/sin tables a llama2.c legacy checkpoint stores ([n_ctx, d_head/2] each), which
    are not learned; 0 for other models. `active` is, for a mixture of experts, the parameters
    one token meets (`experts_per_token` experts of each layer); for a dense model, `total`.
    """

    rows: tuple[ParamRow, ...]
    total: int
    stored_rope: int
    active: int

    @property
    def total_with_stored_rope(self) -> int:
        return self.total + self.stored_rope

    def share(self, row: ParamRow) -> float:
        """Fraction of the learned total in `row`."""
        return row.count / self.total


def _per_layer(n_layers: int, parts: list[tuple[int, ...]], repeat: int = 1) -> tuple[str, int]:
    """`n_layers x ([a, b] + [c])` (or `n_layers x repeat x (...)`) and its count."""
    shape = " + ".join(f"[{', '.join(map(str, p))}]" for p in parts)
    count = sum(math.prod(p) for p in parts)
    times = f"{n_layers} x {repeat} x" if repeat > 1 else f"{n_layers} x"
    return f"{times} ({shape})", n_layers * repeat * count


def _gpt2_rows(a: Architecture) -> list[ParamRow]:
    d, L, ff = a.d_model, a.n_layers, a.d_ff
    return [
        ParamRow("token embedding", f"[{a.vocab_size}, {d}]", a.vocab_size * d),
        ParamRow("position embedding", f"[{a.n_ctx}, {d}]", a.n_ctx * d),
        ParamRow("attention q, k, v", *_per_layer(L, [(d, 3 * d), (3 * d,)])),
        ParamRow("attention output", *_per_layer(L, [(d, d), (d,)])),
        ParamRow("MLP", *_per_layer(L, [(d, ff), (ff,), (ff, d), (d,)])),
        ParamRow("norms (LayerNorm gain, bias)", f"{2 * L + 1} x [2, {d}]", (2 * L + 1) * 2 * d),
    ]


def _swiglu(d_model: int, d_ff: int, fused: bool = False) -> list[tuple[int, ...]]:
    """A gated MLP's gate, up and down matrices (gate and up as one [2 d_ff, d_model] where `fused`)."""
    if fused:
        return [(2 * d_ff, d_model), (d_model, d_ff)]
    return [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)]


def _mlp_rows(a: Architecture) -> list[ParamRow]:
    """The dense MLPs, and a mixture of experts' routed experts, routers and shared experts."""
    d, dense = a.d_model, a.n_layers - a.moe_layers
    rows = []
    if dense:
        gate_up = "gate and up fused" if a.fused_gate_up else "gate, up"
        rows.append(ParamRow(f"MLP ({gate_up}, down)", *_per_layer(dense, _swiglu(d, a.d_ff, a.fused_gate_up))))
    if a.moe_layers:
        experts = f"MLP ({a.n_experts} SwiGLU experts: gate, up, down)"
        rows.append(ParamRow(experts, *_per_layer(a.moe_layers, _swiglu(d, a.d_expert), a.n_experts)))
        rows.append(ParamRow("expert router", *_per_layer(a.moe_layers, [(a.n_experts, d)])))
    if a.moe_layers and a.d_shared_expert:
        shared = [*_swiglu(d, a.d_shared_expert), (1, d)]
        rows.append(ParamRow("shared expert (gate, up, down) and its gate", *_per_layer(a.moe_layers, shared)))
    return rows


def _llama_rows(a: Architecture) -> list[ParamRow]:
    d, L, q, kv = a.d_model, a.n_layers, a.n_heads * a.d_head, a.n_kv_heads * a.d_head
    qkv: list[tuple[int, ...]] = [(q + 2 * kv, d)] if a.fused_qkv else [(q, d), (kv, d), (kv, d)]
    rows = [
        ParamRow("token embedding", f"[{a.vocab_size}, {d}]", a.vocab_size * d),
        ParamRow(
            ("attention q, k, v" + (" (fused)" if a.fused_qkv else "") + (" (with biases)" if a.qkv_bias else "")),
            *_per_layer(L, [*qkv, (q,), (kv,), (kv,)] if a.qkv_bias else qkv),
        ),
        ParamRow(
            "attention output (with bias)" if a.o_bias else "attention output",
            *_per_layer(L, [(d, q), (d,)] if a.o_bias else [(d, q)]),
        ),
    ]
    if a.qk_norm_whole:
        rows.append(ParamRow("q/k norms (RMSNorm gain over the projection)", *_per_layer(L, [(q,), (kv,)])))
    elif a.qk_norm:
        rows.append(ParamRow("q/k norms (RMSNorm gain over d_head)", *_per_layer(L, [(a.d_head,), (a.d_head,)])))
    rows += _mlp_rows(a)
    # per layer: before attention and the MLP (Gemma 2: after each too; OLMo 2: after each only)
    norms = (2 * a.pre_norm + 2 * a.sandwich_norm) * L + 1
    rows.append(ParamRow("norms (RMSNorm gain)", f"{norms} x [{d}]", norms * d))
    return rows


def parameter_table(model: ModelConfig | Architecture) -> ParamTable:
    """The parameter breakdown of `model`; `total` is the exact number of learned parameters."""
    a = from_config(model) if isinstance(model, ModelConfig) else model
    rows = _gpt2_rows(a) if a.family == "gpt2" else _llama_rows(a)
    V, d = a.vocab_size, a.d_model
    if a.tie_embeddings:
        rows.append(ParamRow("classifier (tied to token embedding)", f"[{V}, {d}]", 0))
    else:
        rows.append(ParamRow("classifier", f"[{V}, {d}]", V * d))
    total = sum(r.count for r in rows)
    idle_experts = a.moe_layers * (a.n_experts - a.experts_per_token) * 3 * a.d_model * a.d_expert
    stored_rope = 2 * a.n_ctx * (a.d_head // 2) if a.stores_rope_tables else 0
    return ParamTable(tuple(rows), total, stored_rope, total - idle_experts if a.n_experts else total)


def count_parameters(model: ModelConfig | Architecture) -> int:
    """The exact number of learned parameters of `model`."""
    return parameter_table(model).total
