"""A port written for Llama 2, as Meta's code is: it refuses configs of other families, loads the weights
strictly (a weight it has no place for, an attention bias, is an error, as `load_state_dict` makes it),
sizes its heads d_model / n_heads (a config's own head_dim is a size mismatch) and knows no RoPE scaling
(it computes without it). Correct on the plain Llama it was written for: with
`Constraints(families=("llama",), switches=())` declared (`build_declared`) it conforms; declaring nothing
(`build`), it fails on the switches the suite draws for `llama`, and the verdict must say so first."""

from __future__ import annotations

import numpy as np

from verifier import Constraints, ModelConfig, NumpyModel, Unsupported, Weights
from verifier.model.weights import weight_shapes


def build(config: ModelConfig, weights: Weights) -> NumpyModel:
    if config.family != "llama":
        raise Unsupported(f"a Llama 2 port: no {config.family}")
    llama2 = config.replace(head_dim=None, rope_scaling=None, qkv_bias=False, o_bias=False)
    shapes = weight_shapes(llama2)
    unexpected = sorted(set(weights) - set(shapes))
    if unexpected:
        raise KeyError(f"Unexpected key(s) in state_dict: {', '.join(unexpected[:2])}")
    for name, shape in shapes.items():
        if np.shape(weights[name]) != shape:
            raise RuntimeError(f"size mismatch for {name}: copying a param with shape {np.shape(weights[name])}")
    return NumpyModel(llama2, dict(weights))


def build_declared(config: ModelConfig, weights: Weights) -> NumpyModel:
    return build(config, weights)


build_declared.constraints = Constraints(families=("llama",), switches=())  # type: ignore[attr-defined]
