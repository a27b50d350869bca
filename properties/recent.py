"""The values a run used last, kept up to a memory budget: a property's cases come back for the next model
(each property runs every model on the same derandomized cases), so their weights and oracles are worth
keeping while they are small; a large one (GPT-2 124M's) is kept only while it is the one in use."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    """Values by key, the least recently used dropped first while their sizes (`size(value)`, bytes) sum
    above `budget`; the value just asked for is always kept, whatever its size."""

    def __init__(self, budget: int, size: Callable[[V], int]) -> None:
        self.budget = budget
        self._size = size
        self._values: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value of `key`, made (`make()`) unless kept."""
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key][0]
        value = make()
        self._values[key] = (value, self._size(value))
        while len(self._values) > 1 and sum(size for _, size in self._values.values()) > self.budget:
            self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()
