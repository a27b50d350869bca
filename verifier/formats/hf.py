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
from verifier.model.config import HF_CLASSES, ModelConfig
from verifier.model.weights import CLASSIFIER, WeightMap, classifier_name


def model_class(config: ModelConfig) -> Any:
    """The family's `transformers` causal-LM class (`GPT2LMHeadModel`, `LlamaForCausalLM`, `Gemma2ForCausalLM`, ...)."""
    import transformers

    return getattr(transformers, HF_CLASSES[config.family][1])


def _skipping_init() -> contextlib.AbstractContextManager[None]:
    """Skip transformers' random initialisation, which is overwritten anyway (seconds for GPT-2)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older or newer layouts: initialise, only slower
        return contextlib.nullcontext()
    return no_init_weights()


def build_model(config: ModelConfig, weights: WeightMap, dtype: Any = None, attn_implementation: str = "eager") -> Any:
    """A `transformers` model on the CPU holding exactly `weights`, in eval mode.

    `dtype` is a torch dtype (default float32): the model is built in it, and each weight is looked
    up and converted into its parameter one at a time, so a `LazyWeights` read from a file larger
    than memory needs the model's own size plus one weight. Eager attention is the default because
    it is the plain math (and the only implementation that returns attention probabilities).
    """
    extra.require("a transformers model")
    import torch

    hf_config = config.to_transformers()
    with _skipping_init():
        model = model_class(config)._from_config(
            hf_config, dtype=dtype or torch.float32, attn_implementation=attn_implementation
        )
    parameters = dict(model.named_parameters())
    # A tied classifier is read from the embedding (a parameter of its own, or the embedding's, listed once).
    source = {name: classifier_name(config) if name == CLASSIFIER else name for name in parameters}
    if set(source.values()) != set(weights):
        missing, unexpected = set(source.values()) - set(weights), set(weights) - set(source.values())
        raise ValueError(
            f"weights do not fit {type(model).__name__}: "
            f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    with torch.no_grad():
        for name, parameter in parameters.items():
            array = np.asarray(weights[source[name]])
            # torch refuses to share a read-only (memory-mapped) array: copy that one first.
            parameter.copy_(torch.from_numpy(array if array.flags.writeable else array.copy()))
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


def inert_parameters(config: ModelConfig) -> int:
    """Parameters `transformers` holds for `config` that compute nothing and the suite's weight set
    lacks: a Qwen2-MoE without a shared expert is built with one of size 0, whose [1, d_model] gate it
    counts on every MoE layer though it multiplies nothing (tests/test_config.py: the block's output
    does not depend on it)."""
    if config.family != "qwen2_moe" or config.d_shared_expert is not None:
        return 0
    return sum(map(config.is_moe_layer, range(config.n_layers))) * config.d_model
