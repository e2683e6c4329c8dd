"""The service's notion of time: an injectable clock and the timestamp text every ledger key uses.

It sits below every layer (the ledger is the lowest that needs it), so workers, tools and MCP share
one ``Clock`` type and a test hands one fake clock to all of them.

Every stored timestamp is written as RFC 3339 in UTC with a ``Z`` suffix, and read back leniently
(``+00:00``, ``Z``, up to seven fractional digits as Graph writes them), so values written by the
single-host system and by the fleet compare equal.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive value is taken to be UTC already (Graph times are UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def parse_timestamp(text: str) -> datetime:
    """An aware UTC datetime from RFC 3339 / ISO 8601 text with a time part; ValueError otherwise."""
    stripped = text.strip()
    # A bare date parses as midnight; a stored timestamp always has a time, so a date is corrupt.
    if "T" not in stripped.upper():
        raise ValueError("not a timestamp: no time part")
    return as_utc(datetime.fromisoformat(stripped))


def later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two optional times (None is earlier than any time)."""
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def format_timestamp(moment: datetime) -> str:
    return as_utc(moment).isoformat().replace("+00:00", "Z")
