"""Timestamps as Graph writes and reads them, and the relative times seeds may use."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def utc(dt: datetime) -> datetime:
    if dt.tzinfo is None:
        raise ValueError(
            f"timestamp {dt.isoformat()} has no timezone; write it with Z or an offset"
        )
    return dt.astimezone(timezone.utc)


def truncate_ms(dt: datetime) -> datetime:
    return dt.replace(microsecond=dt.microsecond - dt.microsecond % 1000)


def epoch_ms(dt: datetime) -> int:
    dt = utc(dt)
    return int(dt.timestamp()) * 1000 + dt.microsecond // 1000


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, timezone.utc).replace(microsecond=(ms % 1000) * 1000)


def teams_time(dt: datetime) -> str:
    """Teams resources: millisecond precision, e.g. 2026-11-29T10:15:30.123Z."""
    dt = utc(dt)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def outlook_time(dt: datetime) -> str:
    """Outlook resources: second precision, e.g. 2026-11-29T10:15:30Z."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%SZ")


def inner_error_date(dt: datetime) -> str:
    """The innerError date Graph writes: no fraction, no zone."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%S")


def parse_iso(value: str) -> datetime:
    """An ISO-8601 instant with a zone (Z or an offset); anything else raises ValueError."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # Python 3.11 parses at most 6 fraction digits; .NET writes 7.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    return utc(datetime.fromisoformat(text))


def resolve_time(value: str | datetime | None, now: datetime) -> datetime | None:
    """A seed time: an ISO instant, or a duration before ``now`` such as "-7d", "-2h", "-30m", "-90s"."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return utc(value)
    match = _RELATIVE.match(value.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        return parse_iso(value)
    except ValueError:
        raise ValueError(
            f"time {value!r} is neither an ISO-8601 instant with a zone nor a relative time like -7d, -2h, -30m"
        ) from None
