"""What a claim tells the delivery layer around its write: the intent before, the landing after.

The ledger knows exactly which messages a claim write will win and under which claim id only once it
has decided on a fresh read; an acknowledging host's delivery record must hold them under that id
*before* the write is sent, so that a replica dying right after the write leaves them owed to the host
(service.delivery.claim_intents). The ledger calls these two hooks and knows nothing else of delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from service.telemetry.metrics import LedgerMetrics

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)
R = TypeVar("R")


class ClaimIntent(Protocol[M_contra]):
    async def before_write(self, claim_id: str, won: Sequence[M_contra]) -> bool:
        """Record that ``won`` is about to be claimed as ``claim_id``; False: do not write the claim."""

    async def after_write(self, claim_id: str, landed: bool) -> None:
        """The write's settled outcome (never called while it is unknown)."""


@dataclass
class IntentAhead(Generic[M]):
    """An intent written *while* the claim reads the cursor, instead of after it: for a claim that reads
    the cursor itself (a chat claim usually decides on the poller's look at the cursor before its Graph
    read, and writes its intent after that decision, with no read on its path at all).

    The intent must be stored before the claim write is sent, and what a write wins is known only
    from the read. A chat's poller offers only what lies past its own watermark, so the read nearly
    always leaves every offered message claimable: the intent of all of them, under the claim id the
    write will then carry, is written beside the read, and the acknowledgement costs the push path
    max(read, intent) instead of read + intent. When the read says otherwise (another replica claimed
    some, or the chat got a cursor meanwhile) this intent is taken back and the claim writes one of
    its own for exactly what it wins, after the read, as it would without it.
    """

    intent: ClaimIntent[M]
    claim_id: str
    ids: frozenset[str]  # the offered messages' ids
    written: bool = False
    settled: bool = False

    async def beside(self, read: Awaitable[R], offered: Sequence[M], metrics: LedgerMetrics) -> R:
        """The read's result, once the intent of ``offered`` is written too (or failed: ``written``)."""
        write = asyncio.ensure_future(self.intent.before_write(self.claim_id, offered))
        try:
            result = await read
            read_done = time.perf_counter()
            self.written = await write
        except BaseException:
            # Cancelled or failed mid-read: nothing is claimed, so an intent that landed lapses.
            write.cancel()
            self.settled = True
            raise
        metrics.claim_intent.labels(path="beside_read").observe(time.perf_counter() - read_done)
        return result

    def covers(self, won_ids: Sequence[str]) -> bool:
        """Whether this intent names exactly what the write will win."""
        return not self.settled and frozenset(won_ids) == self.ids

    async def drop(self) -> None:
        """Not this claim's intent after all: its messages are nobody's yet, its entries go."""
        if self.settled:
            return
        self.settled = True
        if self.written:
            await self.intent.after_write(self.claim_id, landed=False)


async def timed_intent(
    intent: ClaimIntent[M], claim_id: str, won: Sequence[M], metrics: LedgerMetrics
) -> bool:
    """``intent.before_write`` after the read: all of it on the claim's path."""
    started = time.perf_counter()
    written = await intent.before_write(claim_id, won)
    metrics.claim_intent.labels(path="after_read").observe(time.perf_counter() - started)
    return written
