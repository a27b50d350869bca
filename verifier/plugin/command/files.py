"""The model files a program reads: each drawn model is written in the format the user names.

`FORMATS` maps a format's name to its writer. A config a format cannot hold (a GPT-2 model in a
llama2.c file, another RMSNorm eps) raises `Unsupported` with the writer's reason, so the suite
draws other configs. GGUF comes from `verifier.formats.gguf` when the `gguf` package is installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from verifier.analysis.precision import Q8_0, Precision, q8_0
from verifier.formats.errors import CheckpointError
from verifier.formats.hf_dir import write_hf_dir
from verifier.formats.llama2c import write_llama2c
from verifier.formats.llama2c_layout import header_for
from verifier.model.config import ConfigError, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.interface import Unsupported

Writer = Callable[[Path, ModelConfig, Weights], None]


def _llama2c(version: int) -> Writer:
    def write(path: Path, config: ModelConfig, weights: Weights) -> None:
        write_llama2c(path, config, weights, version=version)

    return write


def _gguf(tensor_type: str) -> Writer:
    def write(path: Path, config: ModelConfig, weights: Weights) -> None:
        try:
            gguf = importlib.import_module("verifier.formats.gguf")
        except ImportError as e:
            raise Unsupported(f"no GGUF writer is available here ({e}): pip install 'lm-verifier[gguf]'") from None
        gguf.write_gguf(path, config, weights, tensor_type=tensor_type)

    return write


# name -> (writer, file name in the run's directory, what it is)
FORMATS: dict[str, tuple[Writer, str, str]] = {
    "hf": (write_hf_dir, "model", "a Hugging Face directory: config.json and model.safetensors"),
    "llama2c-v0": (_llama2c(0), "model.bin", "llama2.c's legacy file (run.c), RoPE tables included"),
    "llama2c-v1": (_llama2c(1), "model.bin", "llama2.c's version-1 float32 file"),
    "llama2c-v2": (_llama2c(2), "model.bin", "llama2.c's version-2 int8 Q8_0 file (runq.c)"),
    "gguf": (_gguf("F32"), "model.gguf", "a GGUF file (llama.cpp's gpt2 or llama architecture) in F32"),
    "gguf-q8_0": (_gguf("Q8_0"), "model.gguf", "a GGUF file with its matrices in Q8_0 (rows a multiple of 32)"),
}


def is_llama2c(name: str) -> bool:
    """Whether the format is one of llama2.c's (which come with a tokenizer.bin)."""
    return name.startswith("llama2c")


def write_model(name: str, directory: Path, config: ModelConfig, weights: Weights) -> Path:
    """Write the model in format `name` into `directory`; Unsupported if the format cannot hold it."""
    writer, file_name, _ = FORMATS[name]
    path = directory / file_name
    try:
        writer(path, config, weights)
    except (CheckpointError, ConfigError) as e:
        raise Unsupported(f"the {name} format cannot hold this model: {e}") from None
    return path


def version2_precision(config: ModelConfig) -> Precision:
    """The precision class of `config` written as a llama2.c version-2 file: Q8_0 in the group size the
    writer picks (`verifier.formats.llama2c_layout.header_for`), float32 scales; runq.c quantizes activations
    in the same groups."""
    return q8_0(header_for(config, 2).group_size, float16_scales=False)


def stored_precision(name: str, config: ModelConfig) -> Precision | None:
    """The precision class of what format `name` stores for `config`, when it is not float32: a
    program reading a version-2 llama2.c file or a Q8_0 GGUF file computes on its Q8_0 weights."""
    if name == "llama2c-v2":
        return version2_precision(config)
    return Q8_0 if name == "gguf-q8_0" else None
