"""A bounded window of keys already seen: what keeps the bridge from re-emitting a push."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

DEFAULT_WINDOW = 4096


class DedupeWindow:
    """Remembers the last ``capacity`` keys; ``first_sight`` is True once per key while it is remembered.

    Bounded because the bridge runs for days: a replayed or re-delivered push arrives within seconds of
    the original (a ``Last-Event-ID`` replay, a fleet re-delivery after failover), never thousands of
    pushes later.
    """

    def __init__(self, capacity: int = DEFAULT_WINDOW) -> None:
        if capacity < 1:
            raise ValueError("the dedupe window must hold at least one key")
        self._capacity = capacity
        self._seen: OrderedDict[Hashable, None] = OrderedDict()

    def first_sight(self, key: Hashable) -> bool:
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._seen)
