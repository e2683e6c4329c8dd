"""Sending once where Graph has no idempotency key: the rule a chat post and a mail share.

A POST whose answer was lost (``GraphUnavailable`` with ``outcome_unknown``: a 5xx or 504 after Graph
took it, a connection reset) may or may not have happened. It is settled by reading back the send's own
copy since just before the attempt, a few looks a moment apart:

* found: it happened, and is not sent again;
* every look complete and empty: it did not, and it is sent again, once (a second unknown outcome is
  settled the same way);
* a look that cannot prove absence — a failed read, an unreadable item, more pages than were read — or
  nothing found after the second attempt: ``SendUnknown``, and the caller says it MAY have happened.

Why several looks: Graph documents no read-after-write guarantee for either (read, not run), so a later
look catches a copy still on its way. The look-back starts a minute before the attempt so the fleet's
and Graph's clocks may differ; what the copy must look like is each sender's own rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from pydantic import BaseModel

from service.clock import Clock
from service.graph.errors import GraphError, GraphUnavailable
from service.graph.pages import Page

LOOK_BACK = timedelta(minutes=1)
SETTLE_PAUSE_S = 2.0

T = TypeVar("T")
F = TypeVar("F")
M = TypeVar("M", bound=BaseModel)  # a Graph item, as Page holds them


class SendUnknown(Exception):
    """Graph failed after receiving the send, and reading back could not tell whether it happened."""


@dataclass(frozen=True)
class Settled(Generic[T, F]):
    answer: T | None  # Graph's answer to the attempt that went through
    found: F | None  # the copy read back when Graph lost its answer
    retried: bool  # the first attempt provably did not happen; this is the second


async def first_in_pages(
    pages: AsyncGenerator[Page[M], None], is_it: Callable[[M], bool]
) -> M | None:
    """The first listed item ``is_it`` accepts; None when the listing ended without one; SendUnknown when
    the listing cannot prove absence (Graph failed, an item was unreadable, the page budget ran out)."""
    try:
        async with aclosing(pages):
            async for page in pages:
                if page.skipped:
                    raise SendUnknown  # an unreadable item may be the copy
                for item in page.items:
                    if is_it(item):
                        return item
                if page.next_link is None:
                    return None
    except GraphError:
        raise SendUnknown from None
    raise SendUnknown  # more pages than were read


@dataclass(frozen=True)
class SendOnce:
    clock: Clock
    looks: int
    pause_s: float = SETTLE_PAUSE_S
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def send(
        self, attempt: Callable[[], Awaitable[T]], look: Callable[[datetime], Awaitable[F | None]]
    ) -> Settled[T, F]:
        """``attempt`` once, or twice when the first provably did not happen; ``look(since)`` finds the
        send's copy. GraphError for a failure that did nothing, SendUnknown when nobody can tell."""
        for n in range(2):
            started = self.clock()
            try:
                return Settled(await attempt(), None, retried=n > 0)
            except GraphUnavailable as exc:
                if not exc.outcome_unknown:
                    raise
            found = await self.look_for(look, started - LOOK_BACK)
            if found is not None:
                return Settled(None, found, retried=n > 0)
        raise SendUnknown

    async def look_for(
        self, look: Callable[[datetime], Awaitable[F | None]], since: datetime
    ) -> F | None:
        """The copy in one of ``looks`` looks a moment apart; None when every look was complete and empty."""
        for n in range(self.looks):
            if n:
                await self.sleep(self.pause_s)
            found = await look(since)
            if found is not None:
                return found
        return None
