"""Each built-in model at a precision class with one deliberate bug, plugged in as a user's factory."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis.precision import Precision
from verifier.formats.llama2c import to_interleaved, to_rotate_half
from verifier.model.config import ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.adapters import hf_transformers, llama2c
from verifier.plugin.adapters.reference import RoundedReference

Factory = Callable[[ModelConfig, Weights], Any]


def transformers_scaled_by_d_head(build: Factory) -> Factory:
    """transformers at a class, its attention scores divided by d_head instead of sqrt(d_head)."""

    def buggy(config: ModelConfig, weights: Weights) -> Any:
        model = build(config, weights)
        for module in model.model.modules():
            if hasattr(module, "scaling"):
                module.scaling = 1.0 / config.d_head
        return model

    return buggy


def reference_output_projection_transposed(precision: Precision) -> Factory:
    """The reference at `precision` with the attention output projection used transposed."""

    def buggy(config: ModelConfig, weights: Weights) -> Any:
        suffix = "attn.c_proj.weight" if config.family == "gpt2" else "self_attn.o_proj.weight"
        swapped = {name: (w.T.copy() if name.endswith(suffix) else w) for name, w in weights.items()}
        return RoundedReference(config, swapped, precision)

    return buggy


class InterleavedV2Reader(llama2c.V2Reader):
    """The version-2 reader that forgets to put q/k rows back in rotate-half order."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        super().__init__(config, weights)
        resident = self.weights
        assert isinstance(resident, dict)  # a resident (not streamed) model holds its converted weights
        for name, w in resident.items():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = config.n_heads if name.endswith("q_proj.weight") else config.n_kv_heads
                resident[name] = to_interleaved(np.ascontiguousarray(w), heads)


def v2_reader_keeping_interleaved_rows(config: ModelConfig, weights: Weights) -> Any:
    if config.family != "llama":
        return llama2c.build_v2_reader(config, weights)  # raises Unsupported
    return InterleavedV2Reader(config, weights)


def llamacpp_rows_not_interleaved(build: Factory) -> Factory:
    """llama.cpp (`build`: on a Q8_0, Q4_0 or K-type file) whose q/k rows were left in rotate-half order (the
    writer's permutation to llama.cpp's interleaved RoPE pairs undone): RoPE pairs the wrong dimensions."""

    def buggy(config: ModelConfig, weights: Weights) -> Any:
        swapped = dict(weights)
        for name, w in weights.items():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = config.n_heads if name.endswith("q_proj.weight") else config.n_kv_heads
                swapped[name] = to_rotate_half(np.ascontiguousarray(w), heads)
        return build(config, swapped)

    return buggy


RUNQ_BUG = ("score /= sqrtf(head_size);", "score /= head_size;")


def runq_tree_scaled_by_d_head(tree: Path, into: Path) -> Path:
    """A copy of llama2.c's tree whose runq.c divides attention scores by head_size, not its sqrt."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("run.c", "runq.c"):
        shutil.copy(tree / name, into / name)
    source = (into / "runq.c").read_text()
    assert RUNQ_BUG[0] in source, "runq.c no longer scales scores as this bug expects"
    (into / "runq.c").write_text(source.replace(*RUNQ_BUG))
    return into


TRANSFORMERS = {
    "transformers-bfloat16": transformers_scaled_by_d_head(hf_transformers.build_bfloat16),
    "transformers-float16": transformers_scaled_by_d_head(hf_transformers.build_float16),
}
