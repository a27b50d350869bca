"""llama2.c's C program `run.c` as a model under test: a black box with the `greedy` capability only.

The model is written in llama2.c's legacy format and run at temperature 0; see
`verifier.plugin.llama2c.program`. Configs this run.c cannot run (GPT-2, grouped-query attention, another
RMSNorm eps) and machines without a C compiler or the verified source raise `Unsupported`.
"""

from __future__ import annotations

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.interface import Unsupported
from verifier.plugin.llama2c.build import Llama2cUnavailable, binary
from verifier.plugin.llama2c.program import Llama2cProgram, unsupported_reason


def _build(config: ModelConfig, weights: Weights, optimization: str) -> Llama2cProgram:
    reason = unsupported_reason(config)
    if reason:
        raise Unsupported(reason)
    try:
        program = binary(optimization)
    except Llama2cUnavailable as e:
        raise Unsupported(str(e)) from None
    return Llama2cProgram(config, weights, program)


def build(config: ModelConfig, weights: Weights) -> Llama2cProgram:
    """run.c built with -O3, as llama2.c's Makefile builds `run`."""
    return _build(config, weights, "O3")


def build_fast(config: ModelConfig, weights: Weights) -> Llama2cProgram:
    """run.c built with -Ofast (`runfast` in llama2.c's Makefile), for benchmarks."""
    return _build(config, weights, "Ofast")
