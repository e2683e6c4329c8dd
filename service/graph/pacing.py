"""When the Graph client may send its next request: one hold for the whole client, and one probe after it.

Graph's budget is per app per tenant and a refused request counts against it, so when Graph says
"later" every request of the client waits, not only the one that was told:

- **429, or any 5xx, with Retry-After**: hold until then (capped at ``max_hold_s``). Graph's throttling
  guidance: "Wait the number of seconds specified in the Retry-After header"; its error reference says a
  503 may be repeated "after a delay, the length of which may be specified in a Retry-After header"
  (read, not run here: no tenant). Such a hold is also announced to the fleet (``SharedHold``), because
  the replicas share the budget that ran out.
- **429, 502, 503, 504 without Retry-After**: a short hold that doubles with each consecutive one and
  resets on any other answer ("If no Retry-After header is provided… we recommend implementing an
  exponential backoff retry policy", same guidance). 1 s at first: a lone gateway hiccup costs about one
  poll cycle. Capped at 16 s: reached after five failures in a row, it is long enough to take a fleet of
  replicas off a struggling service, and short enough that a message posted during an outage is read
  within one more hold once Graph is back. Equal jitter, so replicas that failed together do not return
  together. Not announced to the fleet: a guess of ours, not Graph's word.
- A **500** without Retry-After holds nobody: it is usually one request's fault, and the call's own
  retry backoff (``retry_policy``) handles it.

After a hold, while the last answer was a failure, only **one** request goes (a probe); the others wait
for its answer, then either go (Graph answered) or wait out the next hold the probe brought back.
Without the probe every request that queued up behind the hold would hit a still-failing Graph at the
same instant, once per hold: the fleet would send as much during an outage as before it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from service.telemetry.metrics import GraphMetrics

# Statuses that mean "Graph (or its gateway) is overloaded or away": worth holding every request for.
OVERLOADED = frozenset({429, 502, 503, 504})
# A hold learnt from the fleet that ends within this of our own is the same hold (timestamp rounding).
_SAME_HOLD_S = 0.01


class SharedHold(Protocol):
    """The fleet's shared hold, as the client sees it (``service.ledger.fleet.graph_backoff`` keeps it)."""

    def held_until(self) -> float:
        """Epoch seconds until which some replica was told to hold (0 when none is known)."""

    def announce(self, until: float, status: int, route: str) -> None:
        """Graph told this replica to hold until ``until``: tell the others (never blocks, never raises)."""


@dataclass(frozen=True)
class PacingRules:
    max_hold_s: float = 60.0  # the longest Retry-After honoured (a longer one is capped)
    backoff_base_s: float = 1.0  # the first hold after an overload answer without Retry-After
    backoff_cap_s: float = 16.0

    def backoff(self, failures: int, rng: random.Random) -> float:
        step = min(self.backoff_cap_s, self.backoff_base_s * 2.0 ** max(0, failures - 1))
        return step / 2 + rng.uniform(0, step / 2)


class GraphPacing:
    """The client's hold (``until``, epoch seconds), its count of failures in a row, and the probe gate."""

    def __init__(
        self,
        rules: PacingRules,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        rng: random.Random,
        metrics: GraphMetrics,
        shared: SharedHold | None = None,
    ) -> None:
        self.rules = rules
        self.until = 0.0
        self.failures = 0  # overload answers in a row (a hold learnt from the fleet counts as one)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._shared = shared
        self._metrics = metrics
        self._probe: asyncio.Event | None = None  # set when the probe in flight has its answer

    async def admit(self, waited_out: float = 0.0) -> float:
        """Wait until a request may be sent. ``waited_out`` is a hold the caller already slept through
        (its own retry delay); returns the hold waited out, for the caller's next attempt.

        Each hold is slept through once, from the clock's reading: never a loop on the clock, so a
        test's frozen clock cannot spin here.
        """
        waited = waited_out
        while True:
            self._adopt_shared()
            if self.until > waited and (wait := self.until - self._clock()) > 0:
                waited = self.until
                await self._sleep(wait)
                continue  # another request's answer, or the fleet, may have extended the hold meanwhile
            if self.failures == 0:
                return waited
            if self._probe is None:
                self._probe = asyncio.Event()
                return waited  # this request finds out whether Graph is back
            await self._probe.wait()

    def note(self, status: int | None, retry_after: float | None, route: str) -> None:
        """Record one attempt's answer (``status`` None: no answer at all) and free the probe slot."""
        if self._probe is not None:
            self._probe.set()
            self._probe = None
        if status is None:
            return  # no answer says nothing about Graph's load; the call's own retries handle it
        if status not in OVERLOADED and not (status >= 500 and retry_after is not None):
            if status < 500:
                self.failures = 0  # Graph answered (a 404 is an answer too)
            return
        self.failures += 1
        if retry_after is not None:
            hold, cause = (
                min(retry_after, self.rules.max_hold_s),
                "throttled" if status == 429 else "unavailable",
            )
        else:
            hold, cause = self.rules.backoff(self.failures, self._rng), "backoff"
        until = self._clock() + hold
        if until <= self.until:
            return
        self.until = until
        self._count(cause)
        if retry_after is not None and self._shared is not None:
            self._shared.announce(until, status, route)

    def _adopt_shared(self) -> None:
        if self._shared is None:
            return
        now = self._clock()
        until = min(self._shared.held_until(), now + self.rules.max_hold_s)
        if until > max(self.until + _SAME_HOLD_S, now):
            self.until = until
            self.failures = max(
                self.failures, 1
            )  # another replica saw Graph fail: probe first afterwards
            self._count("fleet")

    def _count(self, cause: str) -> None:
        self._metrics.graph_holds.labels(cause=cause).inc()
