"""Exact parameter counts from a model's sizes alone, component by component.

The formula is written from the architecture, not from a weight set, so that the two can check
each other (and both against `transformers` on the meta device). It counts an `Architecture`: the
counting view that a `ModelConfig` (the models the reference runs) and a published `config.json`
of the families it knows (every family of the suite, and Mixtral) both convert to, so models
the reference does not run (mixtures of experts) are counted by the same formula.
Components follow the articles' grouping: embeddings, attention q/k/v, output projection, MLP,
norms, classifier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verifier.model.config import (
    D_FF_MAX,
    D_MODEL_MAX,
    N_CTX_MAX,
    N_HEADS_MAX,
    N_LAYERS_MAX,
    ROPE_FAMILIES,
    VOCAB_SIZE_MAX,
    ConfigError,
    Family,
    ModelConfig,
    check_size,
    flag_field,
    quote,
)
from verifier.model.config import from_hf_dict as config_from_hf_dict

# config.json model types counted with the Llama layout: the suite's families, and Mixtral.
LLAMA_LIKE = (*ROPE_FAMILIES, "mixtral")


@dataclass(frozen=True)
class Architecture:
    """What the formula needs to know about a model.

    `family` "gpt2" is GPT-2's layout; every other family is the Llama layout (RMSNorm, gated MLP,
    no position table), as is Mixtral's (counted as "llama"). `qkv_bias`: q, k, v projections have
    biases (Qwen2; `attention_bias`); `o_bias`: the output projection too. `qk_norm`: an RMSNorm gain
    of d_head for q and one for k in each layer (Qwen3). `sandwich_norm`: two more RMSNorms per layer,
    after attention and after the MLP (Gemma 2). `n_experts` > 0: each layer's MLP is that many experts behind a router
    [n_experts, d_model], `experts_per_token` of them active (Mixtral); 0: one dense MLP.
    `stores_rope_tables`: the checkpoint also stores RoPE cos/sin tables (llama2.c's legacy format).
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
    sandwich_norm: bool = False
    n_experts: int = 0
    experts_per_token: int = 0
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
        sandwich_norm=c.sandwich_norm,
        stores_rope_tables=c.family == "llama" if stores_rope_tables is None else stores_rope_tables,
    )


# The config.json keys counted here, with the sane maxima the suite's own config states (so a
# hostile num_hidden_layers of 10**19 is refused, not counted); experts are bounded like heads.
_MAXIMA = {
    "hidden_size": D_MODEL_MAX,
    "head_dim": D_MODEL_MAX,
    "num_attention_heads": N_HEADS_MAX,
    "num_key_value_heads": N_HEADS_MAX,
    "num_local_experts": N_HEADS_MAX,
    "num_experts_per_tok": N_HEADS_MAX,
    "vocab_size": VOCAB_SIZE_MAX,
    "max_position_embeddings": N_CTX_MAX,
    "num_hidden_layers": N_LAYERS_MAX,
    "intermediate_size": D_FF_MAX,
}


def _int_field(f: dict[str, Any], name: str, default: int | None = None) -> int:
    value = f.get(name, default)
    if value is None:
        raise ConfigError(name, "missing from the config")
    return check_size(name, value, _MAXIMA[name])


def from_hf_dict(fields: dict[str, Any]) -> Architecture:
    """The counting view of a `config.json` of one of the suite's families, or of Mixtral.

    The families are read by the suite's own config reader (`verifier.model.config.from_hf_dict`), so
    a config is counted exactly as it is run; its ConfigError names the key that cannot be read.
    """
    model_type = fields.get("model_type")
    if model_type == "gpt2":
        return from_config(config_from_hf_dict(fields))
    if model_type in ROPE_FAMILIES:
        return from_config(config_from_hf_dict(fields), stores_rope_tables=False)
    if model_type != "mixtral":
        counted = ", ".join(("gpt2", *LLAMA_LIKE))
        raise ConfigError("model_type", f"the parameter formula counts {counted}; found {quote(model_type)}")
    for flag in ("attention_bias", "mlp_bias"):
        if flag_field(fields, flag, False):
            raise ConfigError(flag, f"{model_type} with biased projections is not counted by the formula")
    d_model = _int_field(fields, "hidden_size")
    n_heads = _int_field(fields, "num_attention_heads")
    n_experts = _int_field(fields, "num_local_experts")
    per_token = _int_field(fields, "num_experts_per_tok")
    if per_token > n_experts:
        raise ConfigError("num_experts_per_tok", f"must be at most num_local_experts={n_experts}, found {per_token}")
    return Architecture(
        family="llama",
        vocab_size=_int_field(fields, "vocab_size"),
        n_ctx=_int_field(fields, "max_position_embeddings"),
        d_model=d_model,
        n_layers=_int_field(fields, "num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=_int_field(fields, "num_key_value_heads", n_heads),
        d_head=_int_field(fields, "head_dim", d_model // n_heads),
        d_ff=_int_field(fields, "intermediate_size"),
        tie_embeddings=flag_field(fields, "tie_word_embeddings", False),
        n_experts=n_experts,
        experts_per_token=per_token,
    )


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


def _swiglu(a: Architecture) -> list[tuple[int, ...]]:
    return [(a.d_ff, a.d_model), (a.d_ff, a.d_model), (a.d_model, a.d_ff)]


def _llama_rows(a: Architecture) -> list[ParamRow]:
    d, L, q, kv = a.d_model, a.n_layers, a.n_heads * a.d_head, a.n_kv_heads * a.d_head
    qkv: list[tuple[int, ...]] = [(q, d), (kv, d), (kv, d)]
    rows = [
        ParamRow("token embedding", f"[{a.vocab_size}, {d}]", a.vocab_size * d),
        ParamRow(
            "attention q, k, v (with biases)" if a.qkv_bias else "attention q, k, v",
            *_per_layer(L, [*qkv, (q,), (kv,), (kv,)] if a.qkv_bias else qkv),
        ),
        ParamRow(
            "attention output (with bias)" if a.o_bias else "attention output",
            *_per_layer(L, [(d, q), (d,)] if a.o_bias else [(d, q)]),
        ),
    ]
    if a.qk_norm:
        rows.append(ParamRow("q/k norms (RMSNorm gain over d_head)", *_per_layer(L, [(a.d_head,), (a.d_head,)])))
    if a.n_experts:
        experts = f"MLP ({a.n_experts} SwiGLU experts: gate, up, down)"
        rows.append(ParamRow(experts, *_per_layer(L, _swiglu(a), a.n_experts)))
        rows.append(ParamRow("expert router", *_per_layer(L, [(a.n_experts, d)])))
    else:
        rows.append(ParamRow("MLP (gate, up, down)", *_per_layer(L, _swiglu(a))))
    norms = (4 if a.sandwich_norm else 2) * L + 1  # per layer: before attention and MLP (Gemma 2: after each too)
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
    idle_experts = a.n_layers * (a.n_experts - a.experts_per_token) * sum(math.prod(p) for p in _swiglu(a))
    stored_rope = 2 * a.n_ctx * (a.d_head // 2) if a.stores_rope_tables else 0
    return ParamTable(tuple(rows), total, stored_rope, total - idle_experts if a.n_experts else total)


def count_parameters(model: ModelConfig | Architecture) -> int:
    """The exact number of learned parameters of `model`."""
    return parameter_table(model).total
