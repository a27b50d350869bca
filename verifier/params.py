"""Exact parameter counts from the config alone, component by component.

The formula is written from the architecture, not from the weight set, so that the two can
check each other (and both against `transformers` on the meta device). Components follow the
articles' grouping: embeddings, attention q/k/v, output projection, MLP, norms, classifier.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.config import ModelConfig


@dataclass(frozen=True)
class ParamRow:
    """One component: its name, the shapes it is made of, and its parameter count."""

    component: str
    shape: str
    count: int


@dataclass(frozen=True)
class ParamTable:
    """The breakdown of a config's parameters.

    `total` counts learned parameters (a tied classifier once). `stored_rope` is the size of
    the RoPE cos/sin tables a llama2.c legacy checkpoint stores ([n_ctx, d_head/2] each), which
    are not learned; it is 0 for models without RoPE.
    """

    rows: tuple[ParamRow, ...]
    total: int
    stored_rope: int

    @property
    def total_with_stored_rope(self) -> int:
        return self.total + self.stored_rope

    def share(self, row: ParamRow) -> float:
        """Fraction of the learned total in `row`."""
        return row.count / self.total


def _per_layer(n_layers: int, parts: list[tuple[int, ...]]) -> tuple[str, int]:
    """`n_layers x ([a, b] + [c])` and its count."""
    shape = " + ".join(f"[{', '.join(map(str, p))}]" for p in parts)
    count = sum(_prod(p) for p in parts)
    return f"{n_layers} x ({shape})", n_layers * count


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def parameter_table(c: ModelConfig) -> ParamTable:
    """The parameter breakdown of `c`; `total` is the exact number of learned parameters."""
    d, L, V = c.d_model, c.n_layers, c.vocab_size
    rows = [ParamRow("token embedding", f"[{V}, {d}]", V * d)]
    if c.family == "gpt2":
        rows.append(ParamRow("position embedding", f"[{c.n_ctx}, {d}]", c.n_ctx * d))
        rows.append(ParamRow("attention q, k, v", *_per_layer(L, [(d, 3 * d), (3 * d,)])))
        rows.append(ParamRow("attention output", *_per_layer(L, [(d, d), (d,)])))
        rows.append(ParamRow("MLP", *_per_layer(L, [(d, c.d_ff), (c.d_ff,), (c.d_ff, d), (d,)])))
        rows.append(ParamRow("norms (LayerNorm gain, bias)", f"{2 * L + 1} x [2, {d}]", (2 * L + 1) * 2 * d))
        stored_rope = 0
    else:
        kv = c.n_kv_heads * c.d_head
        rows.append(ParamRow("attention q, k, v", *_per_layer(L, [(d, d), (kv, d), (kv, d)])))
        rows.append(ParamRow("attention output", *_per_layer(L, [(d, d)])))
        rows.append(ParamRow("MLP (SwiGLU gate, up, down)", *_per_layer(L, [(c.d_ff, d), (c.d_ff, d), (d, c.d_ff)])))
        rows.append(ParamRow("norms (RMSNorm gain)", f"{2 * L + 1} x [{d}]", (2 * L + 1) * d))
        stored_rope = 2 * c.n_ctx * (c.d_head // 2)
    if c.tie_embeddings:
        rows.append(ParamRow("classifier (tied to token embedding)", f"[{V}, {d}]", 0))
    else:
        rows.append(ParamRow("classifier", f"[{V}, {d}]", V * d))
    return ParamTable(tuple(rows), sum(r.count for r in rows), stored_rope)


def count_parameters(c: ModelConfig) -> int:
    """The exact number of learned parameters of `c`."""
    return parameter_table(c).total
