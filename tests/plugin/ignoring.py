"""A port that ignores what the families add: for every RoPE family it builds plain Llama (the NumPy
reference on the config with every switch off, reading only the weights plain Llama has, as a
`load_state_dict(strict=False)` would), accepting every config. Usable as
`--model tests.plugin.ignoring:build`; it must fail, never conform."""

from __future__ import annotations

from verifier import ModelConfig, NumpyModel, Weights
from verifier.model.config import SWITCH_DEFAULTS
from verifier.model.weights import weight_shapes


def plain(config: ModelConfig) -> ModelConfig:
    """`config` as plain Llama of the same sizes (its head_dim kept, so the weights fit)."""
    if config.family == "gpt2":
        return config
    switches = {name: value for name, value in SWITCH_DEFAULTS.items() if name != "head_dim"}
    return config.replace(family="llama", **switches)


def build(config: ModelConfig, weights: Weights) -> NumpyModel:
    llama = plain(config)
    return NumpyModel(llama, {name: weights[name] for name in weight_shapes(llama)})
