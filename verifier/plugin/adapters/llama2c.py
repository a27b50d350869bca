"""llama2.c's C programs as models under test, black boxes with the `greedy` capability only.

`build` is llama2.c's current `run.c` (grouped-query attention, RoPE theta 10000 only) through the
command-line protocol, built from a llama2.c tree (`verifier.plugin.llama2c.checkout`); without a
tree it falls back to the pinned 2023 run.c (`verifier.plugin.llama2c.build`, fetched from PyPI), run
through the same protocol with that run.c's own text rules.
`build_runq` is `runq.c` on version-2 int8 files, declaring the precision class of those files
(`verifier.plugin.command.files.version2_precision`: Q8_0 in the writer's group size, float32 scales);
`build_v2_reader` is this project's version-2 writer and reader with the NumPy reference in
float32 on the dequantized weights, in the same class. llama2.c runs plain Llama only: every other
family, and Llama with a switch on (RoPE scaling, biases, a head_dim of its own), is refused. Configs
a program cannot run, and machines without a compiler or sources, raise `Unsupported` with the reason.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from verifier.formats.llama2c import NORM_EPS, ROPE_THETA, read_llama2c, write_llama2c
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.command import Command
from verifier.plugin.command.files import version2_precision
from verifier.plugin.command.text import RUN_C_2023
from verifier.plugin.interface import Constraints, Unsupported, switches_on
from verifier.plugin.llama2c import checkout
from verifier.plugin.llama2c.build import Llama2cUnavailable, binary
from verifier.reference import NumpyModel

# llama2.c's README runs its programs this way; -t 0 is greedy.
RUN_COMMAND = "{program} {{model}} -t 0 -n {{steps}} -i {{prompt}} -z {{tokenizer}}"
# The 2023 run.c takes positional arguments and reads tokenizer.bin from its current directory.
PINNED_COMMAND = "{program} {{model}} 0.0 {{steps}} {{prompt}}"


def _switches(config: ModelConfig) -> str:
    """`rope_scaling=RopeScaling(...), qkv_bias=True`: the switches `config` turns on, with their values."""
    return ", ".join(f"{name}={getattr(config, name)!r}" for name in switches_on(config))


def current_unsupported_reason(config: ModelConfig) -> str | None:
    """Why llama2.c's current run.c / runq.c cannot run `config`, or None if they can."""
    if config.family != "llama":
        return f"llama2.c implements Llama only, not the {config.family} family"
    if switches_on(config):
        return f"llama2.c implements plain Llama only, not {_switches(config)}"
    if config.norm_eps != NORM_EPS:
        return f"llama2.c hard-codes RMSNorm eps {NORM_EPS:g}; this config has {config.norm_eps:g}"
    if config.rope_theta != ROPE_THETA:
        return f"llama2.c computes RoPE with theta {ROPE_THETA:g} only; this config has {config.rope_theta:g}"
    if config.vocab_size <= 1:
        return f"run.c feeds token 1 first, so vocab_size must exceed 1; found {config.vocab_size}"
    return None


def pinned_unsupported_reason(config: ModelConfig) -> str | None:
    """Why the pinned 2023 run.c (llama2.c at fd68dd2) cannot run `config`, or None if it can.

    Unlike the current run.c it reads the RoPE tables the legacy file stores, so any theta runs.
    """
    if config.family != "llama":
        return f"llama2.c implements Llama only, not the {config.family} family"
    if switches_on(config):
        return f"llama2.c implements plain Llama only, not {_switches(config)}"
    if config.n_kv_heads != config.n_heads:
        return (
            f"this run.c (llama2.c at fd68dd2) has no grouped-query attention "
            f"(n_kv_heads={config.n_kv_heads} < n_heads={config.n_heads})"
        )
    if config.norm_eps != NORM_EPS:
        return f"run.c hard-codes RMSNorm eps {NORM_EPS:g}; this config has {config.norm_eps:g}"
    if config.vocab_size <= 1:
        return f"run.c feeds token 1 first, so vocab_size must exceed 1; found {config.vocab_size}"
    return None


def _current(name: str, file_format: str, config: ModelConfig, weights: Weights) -> Any:
    reason = current_unsupported_reason(config)
    if reason:
        raise Unsupported(reason)
    path = checkout.program(name)
    command = Command.parse(RUN_COMMAND.format(program=path), file_format, "greedy-text")
    return command.build(config, weights)


def _pinned(config: ModelConfig, weights: Weights, optimization: str) -> Any:
    reason = pinned_unsupported_reason(config)
    if reason:
        raise Unsupported(reason)
    try:
        program = binary(optimization)
    except Llama2cUnavailable as e:
        raise Unsupported(str(e)) from None
    command = Command.parse(PINNED_COMMAND.format(program=program), "llama2c-v0", "greedy-text", text_rules=RUN_C_2023)
    return command.build(config, weights)


def build(config: ModelConfig, weights: Weights) -> Any:
    """llama2.c's current run.c (-O3) from a source tree, else the pinned 2023 run.c."""
    try:
        return _current("run", "llama2c-v0", config, weights)
    except Llama2cUnavailable as current:
        try:
            return _pinned(config, weights, "O3")
        except Unsupported as pinned:
            raise Unsupported(f"{current}; and the pinned run.c: {pinned}") from None


def build_runq(config: ModelConfig, weights: Weights) -> Any:
    """llama2.c's current runq.c on the version-2 int8 Q8_0 file, in the file's precision class."""
    try:
        model = _current("runq", "llama2c-v2", config, weights)
    except Llama2cUnavailable as e:
        raise Unsupported(str(e)) from None
    model.precision = version2_precision(config)
    return model


class V2Reader(NumpyModel):
    """The NumPy reference in float32 on the weights this project's reader dequantizes from the
    version-2 file its writer wrote, in the file's precision class."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        with tempfile.TemporaryDirectory(prefix="verifier-v2-") as tmp:
            path = Path(tmp) / "model.bin"
            write_llama2c(path, config, weights, version=2)
            checkpoint = read_llama2c(path)
        super().__init__(checkpoint.config, checkpoint.weights, np.float32)
        self.precision = version2_precision(config)


def build_v2_reader(config: ModelConfig, weights: Weights) -> V2Reader:
    """This project's version-2 (int8 Q8_0) writer and reader, run by the reference in float32."""
    if config.family != "llama":
        raise Unsupported(f"llama2.c files hold Llama models only, not the {config.family} family")
    if switches_on(config):
        raise Unsupported(f"llama2.c files hold plain Llama models only, not {_switches(config)}")
    if config.norm_eps != NORM_EPS or config.rope_theta != ROPE_THETA:
        raise Unsupported(
            f"version-2 files store neither RMSNorm eps nor RoPE theta (llama2.c's {NORM_EPS:g} and "
            f"{ROPE_THETA:g}); this config has {config.norm_eps:g} and {config.rope_theta:g}"
        )
    return V2Reader(config, weights)


def build_pinned(config: ModelConfig, weights: Weights) -> Any:
    """The pinned 2023 run.c (-O3), which needs no llama2.c checkout."""
    return _pinned(config, weights, "O3")


def build_fast(config: ModelConfig, weights: Weights) -> Any:
    """The pinned run.c built with -Ofast (`runfast` in llama2.c's Makefile), for benchmarks."""
    return _pinned(config, weights, "Ofast")


# What the programs hard-code, declared so the suite draws only those configs (the pinned run.c reads
# the RoPE tables from its file, but `build` runs it only where the current run.c is missing).
CURRENT_SHAPES = Constraints(families=("llama",), norm_eps=NORM_EPS, rope_theta=ROPE_THETA, switches=())
PINNED_SHAPES = Constraints(families=("llama",), norm_eps=NORM_EPS, grouped_query=False, switches=())
build.constraints = build_runq.constraints = CURRENT_SHAPES  # type: ignore[attr-defined]
build_pinned.constraints = build_fast.constraints = PINNED_SHAPES  # type: ignore[attr-defined]
