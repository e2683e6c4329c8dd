"""The retry layer of the Graph transport: ``retry_policy``'s rules applied with a clock, a sleep and
randomness (which failures are retried, and why, is written beside the rules)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from service.graph.pacing import GraphPacing
from service.graph.retry_policy import Attempt, RetryPolicy, Step, next_step


class RetryLayer:
    def __init__(
        self,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        rng: random.Random,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._rng = rng

    def decide(self, attempt: Attempt, status: int | None, retry_after: str | None) -> Step:
        return next_step(
            attempt,
            status=status,
            retry_after_header=retry_after,
            now=self._clock(),
            policy=self.policy,
            rng=self._rng,
        )

    async def wait(self, delay: float) -> None:
        await self._sleep(delay)

    async def wait_with_hold(self, delay: float, pacing: GraphPacing, waited_out: float) -> float:
        """One sleep covers both this call's retry delay and the client's hold, if longer; returns the
        hold now waited out, so the pacing layer does not make the call wait for it twice."""
        if pacing.until > waited_out:
            delay = max(delay, pacing.until - self._clock())
            waited_out = pacing.until
        await self._sleep(delay)
        return waited_out
