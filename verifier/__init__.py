"""A verification suite for GPT-2 and Llama implementations.

The library: configs and presets, the canonical weight set, the independent NumPy reference,
exact parameter counts. The property suite lives in `properties/` beside this package.
"""

from importlib import metadata

from verifier.model.config import ConfigError, ModelConfig, from_hf_dict, from_transformers
from verifier.model.params import count_parameters, parameter_table
from verifier.model.presets import PRESETS, preset
from verifier.model.weights import Weights, init_weights, weight_shapes
from verifier.reference import KVCache, NumpyModel

__version__ = metadata.version("lm-verifier")

__all__ = [
    "PRESETS",
    "ConfigError",
    "KVCache",
    "ModelConfig",
    "NumpyModel",
    "Weights",
    "count_parameters",
    "from_hf_dict",
    "from_transformers",
    "init_weights",
    "parameter_table",
    "preset",
    "weight_shapes",
]
