"""Engine models built once per config and weights: an engine's conversion or export takes seconds,
and every property builds the suite's pinned cases again, so an adapter keeps what it built.

A kept model must hold no state between calls (a decode cache is handed back to the caller), so that
sharing it between properties is safe.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from verifier.model.config import ModelConfig
from verifier.model.weights import Weights

M = TypeVar("M")
KEEP = 32  # more than the suite's pinned cases (23), so that each is built once per run


def weights_digest(weights: Weights) -> str:
    """A digest of every weight's name, shape, dtype and bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(weights):
        array = np.ascontiguousarray(weights[name])
        digest.update(f"{name}{array.shape}{array.dtype}".encode())
        digest.update(array.data)
    return digest.hexdigest()


class BuiltOnce(Generic[M]):
    """The last `KEEP` models `make(config, weights)` built, by config and weights digest, the most recently
    used last."""

    def __init__(self, make: Callable[[ModelConfig, Weights], M]) -> None:
        self._make = make
        self._built: OrderedDict[tuple[ModelConfig, str], M] = OrderedDict()

    def __call__(self, config: ModelConfig, weights: Weights) -> M:
        key = (config, weights_digest(weights))
        if key not in self._built:
            self._built[key] = self._make(config, weights)
            while len(self._built) > KEEP:
                self._built.popitem(last=False)
        self._built.move_to_end(key)
        return self._built[key]
