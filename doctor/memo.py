"""One small least-recently-used memo for the per-process caches (loaded catalogues, compiled
conditions, fix plans): a long-lived process (tests, a cluster rank, a notebook) that reads many
inputs keeps only the latest `size` results."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: "OrderedDict[K, V]" = OrderedDict()

    def get(self, key: K) -> Optional[V]:
        v = self._items.get(key)
        if v is not None:
            self._items.move_to_end(key)
        return v

    def put(self, key: K, value: V) -> V:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)
