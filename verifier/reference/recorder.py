"""Types shared by the forward pass: the stage callback, and the RoPE tables passed to each layer."""

from collections.abc import Callable, Mapping

import numpy as np

# Every stage's output passes through `stage(name, value)`, which may record it (a trace) and
# returns the value the pass goes on with: `value` itself, or rounded to a narrower format.
Stage = Callable[[str, np.ndarray], np.ndarray]

# RoPE's cos, sin tables [B, T, r/2] (r: the rotated dims of a head), computed once per forward pass
# (None for GPT-2).
RopeTables = tuple[np.ndarray, np.ndarray]
Rope = RopeTables | None

# A MoE model's expert choice overridden: {layer: int [B, T, top_k] (or [T, top_k]) expert indices}.
Routes = Mapping[int, np.ndarray]


def passing(stage: str, value: np.ndarray) -> np.ndarray:
    """The stage callback of an untraced pass at the model's own precision."""
    return value
