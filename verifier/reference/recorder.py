"""Types shared by the forward pass: the trace callback, and the RoPE tables passed to each layer."""

from collections.abc import Callable

import numpy as np

Recorder = Callable[[str, np.ndarray], None]

# RoPE's cos, sin tables [B, T, d_head/2], computed once per forward pass (None for GPT-2).
RopeTables = tuple[np.ndarray, np.ndarray]
Rope = RopeTables | None


def ignore(stage: str, value: np.ndarray) -> None:
    """The recorder of an untraced pass."""
