"""Reconnect delays: exponential with full jitter, so bridges cut off together do not return together."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.25
    maximum_s: float = 10.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1-based): uniform in [initial, min(max, initial·2^(n-1))]."""
        ceiling = min(self.maximum_s, self.initial_s * 2 ** max(attempt - 1, 0))
        return self.rng.uniform(min(self.initial_s, ceiling), ceiling)
