"""Pending permission requests, shared by the fleet: which replica holds the host that asked.

A sponsor's "yes abcde" may be polled by any replica with a live target, but only the replica whose
bridge session asked for ``abcde`` can hand the verdict back. So the asking replica records the
request here before it asks the sponsor, and every other replica leaves a sponsor's verdict for a
live request alone (it is neither claimed nor delivered as an ordinary push there); the holder claims
it through the chat ledger like any message. A request ends when its verdict is handed over or at its
expiry; after that a reply naming it is an ordinary message and decides nothing.

Key ``permission_requests/<request id>.json``:
``{"request_id", "holder", "nonce", "created_at", "expires_at", "decided"}``.
There is no delete in the storage contract, so an ended request stays, marked decided or expired, and
a new request with the same id (five random letters) may take its key over.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum

from service.ledger.records.cas import UpdateOutcome, count_conflicts, update_value
from service.clock import Clock, format_timestamp, utc_now
from service.ledger.records.fields import load_object, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

PREFIX = "permission_requests/"
WRITE_ATTEMPTS = 3
_WHAT = "permission request"


def request_key(request_id: str) -> str:
    return f"{PREFIX}{request_id}.json"


@dataclass(frozen=True, slots=True)
class PermissionRecord:
    request_id: str
    holder: str  # the replica id holding the asking host's session
    nonce: str  # tells this write apart from an earlier request under the same id
    created_at: datetime
    expires_at: datetime
    decided: bool = False

    def is_live(self, now: datetime) -> bool:
        return not self.decided and now < self.expires_at


def parse_record(text: str) -> PermissionRecord:
    obj = load_object(text, _WHAT)
    decided = obj.get("decided", False)
    if not isinstance(decided, bool):
        raise CorruptValueError(f"{_WHAT}: field 'decided' must be a boolean")
    return PermissionRecord(
        request_id=require_str(obj, "request_id", _WHAT),
        holder=require_str(obj, "holder", _WHAT),
        nonce=require_str(obj, "nonce", _WHAT),
        created_at=require_timestamp(obj, "created_at", _WHAT),
        expires_at=require_timestamp(obj, "expires_at", _WHAT),
        decided=decided,
    )


def render_record(record: PermissionRecord) -> str:
    return json.dumps(
        {
            "request_id": record.request_id,
            "holder": record.holder,
            "nonce": record.nonce,
            "created_at": format_timestamp(record.created_at),
            "expires_at": format_timestamp(record.expires_at),
            "decided": record.decided,
        },
        sort_keys=True,
    )


class ReserveOutcome(str, Enum):
    RESERVED = "reserved"  # ours: the sponsor may be asked
    TAKEN = "taken"  # a live request with this id exists (another host's, or this one asked twice)
    UNRESOLVED = "unresolved"  # could not read or write: ask nobody


class Standing(str, Enum):
    """What a replica may do with a sponsor's verdict for a request id."""

    HELD_HERE = "held_here"  # this replica holds the live request
    HELD_ELSEWHERE = "held_elsewhere"  # leave it for the holder
    NONE = "none"  # no live request: an ordinary message
    UNRESOLVED = "unresolved"  # unknown: leave it for a later cycle (fail closed)


@dataclass
class PermissionRequests:
    backend: MemoryBackend
    replica_id: str
    clock: Clock = utc_now
    metrics: LedgerMetrics = field(kw_only=True)

    async def reserve(self, request_id: str, ttl: timedelta) -> ReserveOutcome:
        now = self.clock()
        mine = PermissionRecord(request_id, self.replica_id, uuid.uuid4().hex, now, now + ttl)

        def change(current: PermissionRecord | None) -> str | None:
            if current is not None and (current.nonce == mine.nonce or current.is_live(now)):
                return None  # ours already landed, or someone else's request is live
            return render_record(mine)

        update = await update_value(
            self.backend,
            request_key(request_id),
            parse=parse_record,
            change=change,
            attempts=WRITE_ATTEMPTS,
        )
        count_conflicts(self.metrics, "permission_requests", update)
        if update.outcome is UpdateOutcome.WRITTEN:
            return ReserveOutcome.RESERVED
        if update.outcome is UpdateOutcome.ALREADY and update.value is not None:
            return (
                ReserveOutcome.RESERVED
                if update.value.nonce == mine.nonce
                else ReserveOutcome.TAKEN
            )
        return ReserveOutcome.UNRESOLVED

    async def standing(self, request_id: str) -> Standing:
        read = await read_parsed(self.backend, request_key(request_id), parse_record)
        if read.outcome is ReadOutcome.UNRESOLVED:
            return Standing.UNRESOLVED
        if read.value is None or not read.value.is_live(self.clock()):
            return Standing.NONE
        return (
            Standing.HELD_HERE if read.value.holder == self.replica_id else Standing.HELD_ELSEWHERE
        )

    async def end(self, request_id: str) -> bool:
        """Mark this replica's request decided (its verdict was handed over, or it expired); True when it is."""

        def change(current: PermissionRecord | None) -> str | None:
            if current is None or current.decided or current.holder != self.replica_id:
                return None
            return render_record(replace(current, decided=True))

        update = await update_value(
            self.backend,
            request_key(request_id),
            parse=parse_record,
            change=change,
            attempts=WRITE_ATTEMPTS,
        )
        count_conflicts(self.metrics, "permission_requests", update)
        return update.holds and update.value is not None and update.value.holder == self.replica_id
