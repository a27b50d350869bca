"""Factories with structural constraints, for the tests of declarations, probing and strategies,
usable as `--model tests.plugin.constrained:<name>`: the NumPy reference refusing (with
`Unsupported`) every config but the published shapes, declared or not, and one that refuses
grouped-query attention."""

from __future__ import annotations

from typing import Any

from verifier import GPT2_PUBLISHED, LLAMA2C_PUBLISHED, Constraints, ModelConfig, NumpyModel, Unsupported, Weights
from verifier.model.presets import gpt2_d_ff, llama2c_hidden_dim
from verifier.plugin.interface import switches_on


def _published_refusal(config: ModelConfig) -> str | None:
    """Why `config` is not a published shape (GPT-2's, or llama2.c's with multiple_of 32), or None."""
    if config.family not in ("gpt2", "llama") or switches_on(config):
        return f"the published shapes are GPT-2's and llama2.c's plain Llama, not this {config.family} config"
    rule = gpt2_d_ff if config.family == "gpt2" else llama2c_hidden_dim
    if config.d_ff != rule(config.d_model):
        return f"d_ff is fixed at {rule(config.d_model)} for d_model {config.d_model}, not {config.d_ff}"
    if config.norm_eps != 1e-5:
        return f"eps is fixed at 1e-5, not {config.norm_eps:g}"
    if config.family == "gpt2" and not config.tie_embeddings:
        return "the classifier is tied to the token embedding"
    if config.family == "llama" and config.rope_theta != 10000.0:
        return f"RoPE theta is fixed at 10000, not {config.rope_theta:g}"
    return None


def published_only(config: ModelConfig, weights: Weights) -> Any:
    """The reference, refusing every config but the published shapes; it declares nothing."""
    reason = _published_refusal(config)
    if reason:
        raise Unsupported(reason)
    return NumpyModel(config, weights)


def published_only_declared(config: ModelConfig, weights: Weights) -> Any:
    """The same, declaring its constraints."""
    return published_only(config, weights)


published_only_declared.constraints = (GPT2_PUBLISHED, LLAMA2C_PUBLISHED)  # type: ignore[attr-defined]


def no_grouped_query(config: ModelConfig, weights: Weights) -> Any:
    """The reference, refusing grouped-query attention; it declares nothing."""
    if config.n_kv_heads != config.n_heads:
        raise Unsupported(f"no grouped-query attention (n_kv_heads {config.n_kv_heads} < n_heads {config.n_heads})")
    return NumpyModel(config, weights)


def llama_up_to_12_positions(config: ModelConfig, weights: Weights) -> Any:
    """The reference for Llama configs of at most 12 positions, declared."""
    return NumpyModel(config, weights)


llama_up_to_12_positions.constraints = Constraints(families=("llama",), max_n_ctx=12)  # type: ignore[attr-defined]
