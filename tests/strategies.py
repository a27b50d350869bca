"""Strategies for the unit tests of the library (the property suite has its own in properties/)."""

from __future__ import annotations

from hypothesis import strategies as st

from verifier.config import FAMILIES, ModelConfig


@st.composite
def small_configs(draw: st.DrawFn, families: tuple[str, ...] = FAMILIES) -> ModelConfig:
    """Valid configs of either family, small enough to build in milliseconds."""
    family = draw(st.sampled_from(families), label="family")
    n_kv_heads = draw(st.integers(1, 4), label="n_kv_heads") if family == "llama" else None
    group = draw(st.integers(1, 3), label="query heads per kv head") if family == "llama" else 1
    n_heads = n_kv_heads * group if n_kv_heads else draw(st.integers(1, 6), label="n_heads")
    d_head = draw(st.integers(1, 8), label="d_head / 2") * 2 if family == "llama" else draw(st.integers(1, 16))
    return ModelConfig(
        family=family,
        vocab_size=draw(st.integers(2, 97), label="vocab_size"),
        n_ctx=draw(st.integers(1, 64), label="n_ctx"),
        d_model=n_heads * d_head,
        n_layers=draw(st.integers(1, 3), label="n_layers"),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads or n_heads,
        d_ff=draw(st.integers(1, 64), label="d_ff"),
        norm_eps=draw(st.sampled_from([1e-5, 1e-6]), label="norm_eps"),
        tie_embeddings=draw(st.booleans(), label="tie_embeddings"),
    )
