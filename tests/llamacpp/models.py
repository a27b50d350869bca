"""llama.cpp restricted to one architecture, so that a suite run judges that architecture alone."""

from __future__ import annotations

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters import llamacpp
from verifier.plugin.interface import Unsupported


def llama_only(config: ModelConfig, weights: Weights) -> llamacpp.LlamaCppModel:
    if config.family != "llama":
        raise Unsupported("this run judges llama.cpp's llama architecture only")
    return llamacpp.build(config, weights)


def gpt2_only(config: ModelConfig, weights: Weights) -> llamacpp.LlamaCppModel:
    if config.family != "gpt2":
        raise Unsupported("this run judges llama.cpp's gpt2 architecture only")
    return llamacpp.build(config, weights)
