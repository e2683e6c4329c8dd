"""The container's first boot, as the daily summary needs it: no summary for a day that ended before it.

Without it every fresh container (or data directory) mailed the sponsors an empty summary of the day
before it existed, on its first evening. ``fleet/first_boot.json`` holds ``{"first_boot": <RFC 3339>}``,
created once with if_absent by whichever replica's summary loop runs first (it runs at start-up, so
that is the first boot to within a start-up); a replica that loses the create reads the winner's.

A container that already held summaries before this record existed predates it: its first boot is
taken as the start of its oldest summary's day, so upgrading a running fleet skips no day.
"""

from __future__ import annotations

import json
import logging
from datetime import date, datetime

from service.clock import Clock, as_utc, format_timestamp, parse_timestamp
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.ledger.summary.daily import day_window
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError

log = logging.getLogger(__name__)

FIRST_BOOT_KEY = "fleet/first_boot.json"
SUMMARIES_PREFIX = "summaries/"


def parse_first_boot(text: str) -> datetime:
    try:
        value = json.loads(text)["first_boot"]
        return parse_timestamp(str(value))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptValueError(f"not a first-boot record: {type(exc).__name__}") from None


def ended_before(day: date, first_boot: datetime) -> bool:
    """Whether the summary keyed ``day`` covers only time before the first boot (its end is not after)."""
    return day_window(day)[1] <= as_utc(first_boot)


class FirstBoot:
    """The container's first boot, read or recorded once, then kept in memory (it never changes)."""

    def __init__(self, backend: MemoryBackend, clock: Clock) -> None:
        self._backend = backend
        self._clock = clock
        self._known: datetime | None = None

    async def stored(self) -> datetime | None:
        """The recorded first boot; None when none is recorded yet or it cannot be read now."""
        if self._known is None:
            read = await read_parsed(self._backend, FIRST_BOOT_KEY, parse_first_boot)
            self._known = read.value if read.outcome is ReadOutcome.PRESENT else None
        return self._known

    async def recorded(self) -> datetime | None:
        """The first boot, recording it now if no replica has; None while storage cannot say."""
        if self._known is not None:
            return self._known
        read = await read_parsed(self._backend, FIRST_BOOT_KEY, parse_first_boot)
        if read.outcome is not ReadOutcome.ABSENT:
            self._known = read.value  # None when unreadable: asked again next run
            return self._known
        try:
            boot = await self._predating() or as_utc(self._clock())
            await self._backend.write_text(
                FIRST_BOOT_KEY, json.dumps({"first_boot": format_timestamp(boot)}), if_absent=True
            )
            log.info("first boot of this container recorded at %s", format_timestamp(boot))
        except StorageError:
            pass  # another replica recorded it first, or storage failed: read what is there
        return await self.stored()

    async def _predating(self) -> datetime | None:
        """The start of the oldest stored summary's day, for a container older than this record."""
        days = []
        for key in await self._backend.list(SUMMARIES_PREFIX):
            try:
                days.append(date.fromisoformat(key[len(SUMMARIES_PREFIX) :].split(".", 1)[0]))
            except ValueError:
                continue
        return day_window(min(days))[0] if days else None
