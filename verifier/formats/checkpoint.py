"""What every reader returns: a `Checkpoint` (config, canonical weights, what the file held, findings).

`check_canonical` is the one validation of a weight set against its config that every reader ends
with: the names, shapes and dtypes of `verifier.model.weights.weight_shapes`, and finite values.
A mapped checkpoint checks names and shapes up front (`check_shapes`) and each array when it is
read (`check_array`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verifier.formats.errors import CheckpointError
from verifier.model.config import ModelConfig
from verifier.model.weights import WeightMap, weight_shapes


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the file stores it: its name in the file, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Checkpoint:
    """A model read from a file.

    `format` is `hf-safetensors`, `hf-safetensors-sharded`, `hf-pytorch`, `hf-pytorch-sharded`,
    `llama2c` or `gguf`; `version` is llama2.c's format version (0, 1 or 2), GGUF's (3), None for HF.
    `weights` is the canonical set (float32, HF names and layouts): a dict when loaded, a
    `LazyWeights` reading the file on each lookup when mapped; `tensors` lists what the file
    itself holds, in file order; `findings` are the validation notes that did not stop loading
    (conversions, assumed constants, dropped buffers).
    """

    path: Path
    format: str
    version: int | None
    config: ModelConfig
    weights: WeightMap
    tensors: tuple[TensorInfo, ...]
    findings: tuple[str, ...]

    @property
    def shared_classifier(self) -> bool:
        return self.config.tie_embeddings

    @property
    def parameter_total(self) -> int:
        """Learned parameters of the canonical weights (a shared classifier once)."""
        return sum(math.prod(shape) for shape in weight_shapes(self.config).values())


def check_canonical(path: Path, config: ModelConfig, weights: WeightMap) -> None:
    """Raise CheckpointError unless `weights` is exactly the canonical set of `config`, all finite."""
    check_shapes(path, config, {name: np.shape(w) for name, w in weights.items()})
    for name, array in weights.items():
        check_array(path, name, array)


def check_shapes(path: Path, config: ModelConfig, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Raise CheckpointError unless `shapes` names exactly the canonical weights of `config`, in their shapes."""
    expected = weight_shapes(config)
    missing = [name for name in expected if name not in shapes]
    if missing:
        raise CheckpointError(
            path, f"tensor {missing[0]}", f"missing ({len(missing)} missing in all: {', '.join(missing[:5])})"
        )
    extra = [name for name in shapes if name not in expected]
    if extra:
        raise CheckpointError(
            path, f"tensor {extra[0]}", f"not a weight of this config ({len(extra)} unexpected: {', '.join(extra[:5])})"
        )
    for name, shape in expected.items():
        if tuple(shapes[name]) != shape:
            raise CheckpointError(path, f"tensor {name}", "wrong shape", expected=list(shape), found=list(shapes[name]))


def check_array(path: Path, name: str, array: np.ndarray) -> None:
    """Raise CheckpointError unless the canonical weight `name` is float32 and finite."""
    if array.dtype != np.float32:
        raise CheckpointError(path, f"tensor {name}", "wrong dtype", expected="float32", found=array.dtype)
    if not _all_finite(array):
        finite = np.isfinite(array)
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise CheckpointError(
            path, f"tensor {name}", f"holds {int((~finite).sum())} non-finite values, the first at {list(index)}",
            expected="finite values", found=array[index],
        )  # fmt: skip


def _all_finite(array: np.ndarray) -> bool:
    """Whether every value is finite. A non-finite value makes the sum of squares NaN or inf, and one
    pass of a dot product reads the weight in half the time of isfinite's (a bool array, then .all());
    a finite sum is the answer, and only one that overflowed is looked at value by value."""
    flat = array.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow here is not the weight's
        squares = np.dot(flat, flat)
    return bool(np.isfinite(squares)) or bool(np.isfinite(array).all())
