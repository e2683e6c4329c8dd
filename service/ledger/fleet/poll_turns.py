"""One poll per interval for the whole fleet: a small blob records when a replica last polled, and a
replica polls only once an interval has passed since, taking the turn with If-Match.

The mailbox was polled by every replica with a live target, once a minute each, so the fleet's Graph
load grew with its replica count (0.1 req/s at 6 replicas, a fifth of the idle budget; SPEC §9). Now
the replicas share one cadence: each still looks every interval (one blob read), and the first to
find the last poll an interval old takes the turn. With N replicas looking at random moments the
fleet polls about every ``interval × (1 - SLACK) + interval / (N + 1)``: once a minute at 1 replica,
about every 63 s at 6.

This is load shaping, not a claim: a turn taken twice costs one extra Graph request, never a
duplicate (the email ledger claims each mail once, whoever polls). So every doubt resolves towards
polling — an unreadable or corrupt record, a storage error, a record from implausibly far in the
future (a replica's clock ahead would otherwise silence the others) — and only a turn another replica
demonstrably took (a fresh record, or a lost If-Match race) skips.

Key ``turns/<name>.json``: ``{"at": ISO-8601 UTC, "by": replica id}`` (no message content).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.clock import Clock, utc_now
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError

log = logging.getLogger(__name__)

PREFIX = "turns/"
# A replica's own loop runs every interval; without slack, its next look could land a hair before
# its own last poll is an interval old and skip a whole interval.
SLACK = 0.1


def turn_key(name: str) -> str:
    return f"{PREFIX}{name}.json"


def _parse_at(text: str) -> datetime | None:
    try:
        obj = json.loads(text)
        at = (
            datetime.fromisoformat(obj["at"])
            if isinstance(obj, dict) and isinstance(obj.get("at"), str)
            else None
        )
    except (ValueError, TypeError):
        return None
    return at if at is not None and at.tzinfo is not None else None


@dataclass
class PollTurn:
    """This replica's side of one fleet-wide poll cadence."""

    backend: MemoryBackend
    name: str
    replica_id: str
    interval: timedelta
    clock: Clock = utc_now

    @property
    def key(self) -> str:
        return turn_key(self.name)

    async def take(self) -> bool:
        """True when this replica should poll now (it took the turn, or cannot tell that another did)."""
        try:
            text, etag = await self.backend.read_text_with_etag(self.key)
        except StorageError as exc:
            log.warning(
                "poll turn unreadable; polling anyway",
                extra={"turn": self.name, "error": type(exc).__name__},
            )
            return True
        now = self.clock()
        last = _parse_at(text) if text is not None else None
        if (
            last is not None
            and last <= now + self.interval
            and now - last < self.interval * (1 - SLACK)
        ):
            return False  # another replica (or this one) polled within the interval
        record = json.dumps({"at": now.isoformat(), "by": self.replica_id}, sort_keys=True)
        try:
            if text is None:
                await self.backend.write_text(self.key, record, if_absent=True)
            else:
                await self.backend.write_text(self.key, record, if_match=etag)
        except ConcurrencyError:
            return False  # another replica took this turn between our read and write
        except StorageError as exc:
            log.warning(
                "poll turn not recorded; polling anyway",
                extra={"turn": self.name, "error": type(exc).__name__},
            )
        return True
