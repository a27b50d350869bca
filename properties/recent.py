"""What a run keeps between tests, up to a memory budget: every property runs each model on the same
derandomized cases (the pinned ones first), so the next model, and the next property, ask for the seeded
weights and the oracle just made. One budget for both: what a run holds beyond the case in use. A case
larger than it (GPT-2 124M's weights) drops everything else and is held only while in use."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

V = TypeVar("V")

BUDGET = 384 << 20  # bytes: stories15M's oracle (about 300 MB with its neighbours) and the small cases around it


class Recent:
    """Values by key, the least recently used dropped first while their sizes (bytes) sum above `budget`;
    the value just asked for is always kept, whatever its size."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], V], size: Callable[[V], int]) -> V:
        """The value of `key`: kept, else `make()`, kept as `size(value)` bytes."""
        if key in self._values:
            self._values.move_to_end(key)
            value: V = self._values[key][0]
            return value
        value = make()
        self._values[key] = (value, size(value))
        while len(self._values) > 1 and sum(size for _, size in self._values.values()) > self.budget:
            self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)


KEPT = Recent(BUDGET)  # the seeded weights of the cases (`cases.Case.weights`) and their oracles (`oracle.oracle`)
