"""A verification suite for implementations of transformer language models (every family of
`verifier.model.config.FAMILIES`: GPT-2, Llama and the families after them).

The library: configs and presets, the canonical weight set, the independent NumPy reference,
exact parameter counts; and what a factory under test declares (`Constraints`, `Unsupported`).
The property suite lives in `properties/` beside this package.
"""

from importlib import metadata

from verifier.model.config import ConfigError, ModelConfig, RopeScaling, from_hf_dict, from_transformers
from verifier.model.params import count_parameters, parameter_table
from verifier.model.presets import PRESETS, gpt2_d_ff, llama2c_hidden_dim, preset
from verifier.model.weights import Weights, init_weights, weight_shapes
from verifier.plugin.interface import GPT2_PUBLISHED, LLAMA2C_PUBLISHED, Constraints, Deviation, Unsupported
from verifier.reference import KVCache, NumpyModel

__version__ = metadata.version("lm-verifier")


def __getattr__(name: str) -> object:
    """`verifier.check` (the suite run in this process, `verifier.report.inprocess.check`), imported when
    first used: it brings pytest and the suite's plugin, which `import verifier` alone does not need."""
    if name == "check":
        from verifier.report.inprocess import check

        return check
    raise AttributeError(f"module 'verifier' has no attribute {name!r}")


__all__ = [
    "GPT2_PUBLISHED",
    "LLAMA2C_PUBLISHED",
    "PRESETS",
    "ConfigError",
    "Constraints",
    "Deviation",
    "KVCache",
    "ModelConfig",
    "NumpyModel",
    "RopeScaling",
    "Unsupported",
    "Weights",
    "check",
    "count_parameters",
    "from_hf_dict",
    "from_transformers",
    "gpt2_d_ff",
    "init_weights",
    "llama2c_hidden_dim",
    "parameter_table",
    "preset",
    "weight_shapes",
]
