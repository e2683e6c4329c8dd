"""Every ledger read classifies as PRESENT, ABSENT or UNRESOLVED (fail-closed reads).

Only ABSENT may treat a key as new. A read that raised, a value that does not parse, and a value
that came back without an ETag (a proxy answering 200 with an error page, say) are UNRESOLVED: the
caller does nothing it could not undo, and never overwrites the value unconditionally.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from service.storage.backend import MemoryBackend

log = logging.getLogger(__name__)

T = TypeVar("T")


class CorruptValueError(ValueError):
    """A stored value that does not have the shape its key promises."""


class ReadOutcome(str, Enum):
    PRESENT = "present"
    ABSENT = "absent"
    UNRESOLVED = "unresolved"


class UnresolvedReason(str, Enum):
    READ_FAILED = "read_failed"
    NO_ETAG = "no_etag"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class Read(Generic[T]):
    """The classified result of reading one key: ``value`` and ``etag`` are set only when PRESENT."""

    outcome: ReadOutcome
    value: T | None = None
    etag: str | None = None
    reason: UnresolvedReason | None = None

    @property
    def why(self) -> str:
        """Why it is UNRESOLVED, as a log-friendly word (the outcome itself otherwise)."""
        return self.reason.value if self.reason is not None else self.outcome.value

    @classmethod
    def absent(cls) -> Read[T]:
        return cls(ReadOutcome.ABSENT)

    @classmethod
    def unresolved(cls, reason: UnresolvedReason) -> Read[T]:
        return cls(ReadOutcome.UNRESOLVED, reason=reason)


async def read_parsed(backend: MemoryBackend, key: str, parse: Callable[[str], T]) -> Read[T]:
    """Read ``key`` with its ETag and parse it; ``parse`` raises ValueError on a corrupt value."""
    try:
        content, etag = await backend.read_text_with_etag(key)
    except Exception as exc:  # noqa: BLE001 - whatever failed, we do not know what is stored
        log.warning("read of %s failed (%s); treating it as unresolved", key, type(exc).__name__)
        return Read.unresolved(UnresolvedReason.READ_FAILED)
    if content is None:
        if etag is not None:  # an ETag for nothing is not an answer the protocol allows
            log.warning(
                "read of %s returned an ETag without a value; treating it as unresolved", key
            )
            return Read.unresolved(UnresolvedReason.CORRUPT)
        return Read.absent()
    if etag is None:
        log.warning("read of %s returned a value without an ETag; treating it as unresolved", key)
        return Read.unresolved(UnresolvedReason.NO_ETAG)
    try:
        value = parse(content)
    except ValueError as exc:
        log.warning("value at %s is corrupt (%s); treating it as unresolved", key, exc)
        return Read.unresolved(UnresolvedReason.CORRUPT)
    return Read(ReadOutcome.PRESENT, value=value, etag=etag)
