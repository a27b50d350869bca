"""The bridge to `transformers`: its models built from canonical weights, and its own counts.

This is the only module besides the transformers adapter and the formats that imports torch or
`transformers`, and it does so on first use, so the rest of the package loads without them; where
they are not installed (the `transformers` extra), each function raises `verifier.extra.ExtraMissing`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from verifier import extra
from verifier.model.config import ModelConfig
from verifier.model.weights import CLASSIFIER, EMBEDDING, Weights


def model_class(config: ModelConfig) -> Any:
    """`GPT2LMHeadModel` or `LlamaForCausalLM`."""
    if config.family == "gpt2":
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM


def _skipping_init() -> contextlib.AbstractContextManager[None]:
    """Skip transformers' random initialisation, which is overwritten anyway (seconds for GPT-2)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older or newer layouts: initialise, only slower
        return contextlib.nullcontext()
    return no_init_weights()


def build_model(config: ModelConfig, weights: Weights, dtype: Any = None, attn_implementation: str = "eager") -> Any:
    """A `transformers` model on the CPU holding exactly `weights`, in eval mode.

    `dtype` is a torch dtype (default float32). Eager attention is the default because it is
    the plain math (and the only implementation that returns attention probabilities).
    """
    extra.require("a transformers model")
    import torch

    hf_config = config.to_transformers()
    hf_config._attn_implementation = attn_implementation
    with _skipping_init():
        model = model_class(config)(hf_config).to(dtype or torch.float32)
    state = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in weights.items()}
    if config.tie_embeddings:
        state[CLASSIFIER] = state[EMBEDDING[config.family]]
    model.load_state_dict(state, strict=True)
    return model.eval()


def parameter_count(hf_config: Any) -> int:
    """The number of parameters `transformers` gives a config, instantiated on the meta device.

    `hf_config` is a `transformers` config (e.g. `ModelConfig.to_transformers()`); no memory is
    allocated for the weights, so 70B-class configs are counted in a second.
    """
    extra.require("transformers' parameter count")
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())
