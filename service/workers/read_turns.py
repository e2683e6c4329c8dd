"""How this replica's chat reads take their place among the fleet's (SPEC §9).

Replicas taking the same hint reach the chat a fixed, per-replica moment apart (``spread_s``), so the
replica that claimed spares the others the read; one replica reads one chat at most once per
``min_gap_s`` (Graph allows one read a second per chat); and all of its reads are paced to its share
of the fleet's budget (service.workers.read_pacer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from service.ledger.fleet.readers import ReaderRoster
from service.workers.read_pacer import ReadPacer


@dataclass
class ReadTurns:
    readers: ReaderRoster | None  # the fleet's chat readers: whose turn a hinted chat is
    # Settings.chat_read_spread_s and chat_read_gap_s, given by the wiring (no second default here).
    spread_s: float  # the gap between two replicas' turns
    min_gap_s: float  # between two reads of one chat by this replica
    monotonic: Callable[[], float] = time.monotonic
    pacer: ReadPacer = field(init=False)

    def __post_init__(self) -> None:
        self.pacer = ReadPacer(
            lambda: len(self.readers.readers) if self.readers is not None else 1,
            monotonic=self.monotonic,
        )

    async def refresh(self, reading: bool, now: float) -> None:
        """Tell the fleet whether this replica reads chats now, and learn who else does."""
        if self.readers is not None:
            await self.readers.refresh(reading, now)

    def settling(self, now: float) -> bool:
        """Just started reading: wait until this replica knows the others' turns."""
        return self.readers is not None and self.spread_s > 0 and not self.readers.settled(now)

    def turn(self, chat_id: str, newest: datetime | None) -> int:
        """This replica's turn among the fleet's readers for the chat and when the hinted message was
        written (0: read at once)."""
        if self.readers is None or self.spread_s <= 0:
            return 0
        return self.readers.turn(chat_id, newest)
