"""Settling a claim write whose outcome is unknown, shared by the chat and email ledgers.

A claim is a conditional write that carries a fresh claim id. When the write fails, the error does
not prove it failed: the request may have committed before the response was lost, or a timed-out
request may still commit later. Reading the key back settles it:

==========================================  =========  ==========================================
read-back                                   decision   why
==========================================  =========  ==========================================
failed, corrupt, or a value without ETag    UNKNOWN    nothing can be said; hold, settle later
our claim id is in the value                OURS       our write (or its retry) landed
present, same ETag as our If-Match, no id   RETRY      nothing landed; resend the same write
present, other ETag, no id                  LOST       another write landed first; our If-Match
                                                       is stale, so ours can never commit
absent, we were creating (if_absent)        RETRY      nothing landed; resend the same create
absent, we had an If-Match                  LOST       the key was deleted; that ETag is gone
==========================================  =========  ==========================================

A RETRY resends the *same* content with the *same* condition. If it succeeds the claim is ours, and
the original can never commit, because its If-Match is now stale; if it fails, the loop reads back
again. ETags never repeat (Blob ETags are unique; local ETags hash content that includes the claim
id and a write time), so "same ETag" really means "nothing landed".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Protocol, TypeVar

from service.ledger.records.reads import Read, ReadOutcome
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError

SETTLE_ROUNDS = 3


class ClaimRecord(Protocol):
    """A stored value that remembers the ids of the last claims written into it."""

    def has_claim(self, claim_id: str) -> bool: ...


R = TypeVar("R", bound=ClaimRecord)


class Settlement(str, Enum):
    OURS = "ours"
    LOST = "lost"
    RETRY = "retry"
    UNKNOWN = "unknown"


def decide_settle(read: Read[R], claim_id: str, *, expected_etag: str | None) -> Settlement:
    """What a read-back says about our uncertain claim write (the table in the module docstring)."""
    if read.outcome is ReadOutcome.UNRESOLVED:
        return Settlement.UNKNOWN
    if read.outcome is ReadOutcome.ABSENT:
        return Settlement.RETRY if expected_etag is None else Settlement.LOST
    assert read.value is not None  # PRESENT always carries a value
    if read.value.has_claim(claim_id):
        return Settlement.OURS
    if read.etag == expected_etag:
        return Settlement.RETRY
    return Settlement.LOST


@dataclass(frozen=True)
class ClaimWrite:
    """One conditional claim write, kept whole so that a retry resends exactly the same request."""

    key: str
    content: str
    expected_etag: str | None  # None: create with if_absent
    claim_id: str

    async def send(self, backend: MemoryBackend) -> str:
        if self.expected_etag is None:
            return await backend.write_text(self.key, self.content, if_absent=True)
        return await backend.write_text(self.key, self.content, if_match=self.expected_etag)


@dataclass(frozen=True)
class ClaimWriteResult(Generic[R]):
    """OURS, LOST or UNKNOWN (never RETRY), the last read-back when there was one, and what it cost."""

    settlement: Settlement
    read: Read[R] | None = None
    writes: int = 1
    failed: bool = False  # the first send raised, so the outcome was settled by reading back
    conflicted: bool = False  # the first send raised ConcurrencyError


async def settle_uncertain_write(
    backend: MemoryBackend,
    write: ClaimWrite,
    read_back: Callable[[], Awaitable[Read[R]]],
    *,
    rounds: int = SETTLE_ROUNDS,
) -> ClaimWriteResult[R]:
    """Read back until the claim is OURS or LOST, resending it on RETRY; UNKNOWN after ``rounds`` reads."""
    writes = 0
    for _ in range(rounds):
        read = await read_back()
        decision = decide_settle(read, write.claim_id, expected_etag=write.expected_etag)
        if decision is Settlement.UNKNOWN:
            continue
        if decision is not Settlement.RETRY:
            return ClaimWriteResult(decision, read, writes=writes, failed=True)
        writes += 1
        try:
            await write.send(backend)
        except StorageError:
            continue  # unknown again (or a racing write): the next read-back decides
        return ClaimWriteResult(Settlement.OURS, writes=writes, failed=True)
    return ClaimWriteResult(Settlement.UNKNOWN, writes=writes, failed=True)


async def write_claim(
    backend: MemoryBackend,
    write: ClaimWrite,
    read_back: Callable[[], Awaitable[Read[R]]],
    *,
    rounds: int = SETTLE_ROUNDS,
) -> ClaimWriteResult[R]:
    """Send the claim; on any failure, settle it by reading back (a 412 may hide our own commit too)."""
    try:
        await write.send(backend)
    except StorageError as exc:
        settled = await settle_uncertain_write(backend, write, read_back, rounds=rounds)
        return ClaimWriteResult(
            settled.settlement,
            settled.read,
            writes=1 + settled.writes,
            failed=True,
            conflicted=isinstance(exc, ConcurrencyError),
        )
    return ClaimWriteResult(Settlement.OURS)
