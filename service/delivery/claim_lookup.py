"""Whether the claim an intent names landed: read from the message's own cursor.

An intent is written before its claim, so the replica that wrote it may have died before, during or
after the claim write. The cursor answers: the claim ids of its newest writes are kept in it (32 for a
chat, 32 for the mailbox). Only a present id is proof. An absent one proves the claim never landed
once the intent is older than any claim call can take (``INTENT_LAPSE_S``); the claim id may also
have been pushed out by 32 newer claims, which the cursor shows (every kept mark newer than the
intent, and the message recorded): that case is ``AMBIGUOUS``, never guessed either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from service.delivery.host_record import EntryState, HostRecord, PendingDelivery
from service.domain.conversation import kind_of_source
from service.domain.message import Source
from service.ledger.claims.chat_claims import resolve_cursor
from service.ledger.claims.chat_cursor import CLAIM_MARKS_KEPT
from service.ledger.claims.email_claims import read_email_cursor
from service.ledger.claims.email_cursor import CLAIM_IDS_KEPT
from service.ledger.records.reads import ReadOutcome
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

# Longer than a claim call can run: a read, up to four conditional writes and their settling reads,
# each bounded by the Blob client's timeouts (service/storage/blob_config.py: 5 s to connect, 30 s to read).
INTENT_LAPSE_S = 600.0
# An intent younger than this belongs to a claim that is most likely still being written: it is left to
# its own replica's dispatch before anyone reads the cursor for it.
SETTLE_AFTER_S = 3.0


class ClaimFate(str, Enum):
    LANDED = "landed"  # the claim id is in the cursor: the message is this host's
    NEVER = "never"  # it is not, and can no longer be written: the intent goes
    NOT_YET = "not_yet"  # not in the cursor yet, and the claim may still be in flight
    AMBIGUOUS = (
        "ambiguous"  # its mark may have been pushed out of the cursor: neither pushed nor dropped
    )
    UNKNOWN = "unknown"  # the cursor could not be read now


@dataclass(frozen=True)
class ClaimLookup:
    backend: MemoryBackend

    async def fate(self, entry: PendingDelivery, now: datetime) -> ClaimFate:
        lapsed = now - entry.at > timedelta(seconds=INTENT_LAPSE_S)
        message = entry.message
        if message.source is Source.EMAIL:
            mail = await read_email_cursor(self.backend)
            if mail.outcome is ReadOutcome.UNRESOLVED:
                return ClaimFate.UNKNOWN
            if mail.value is not None and mail.value.has_claim(entry.claim):
                return ClaimFate.LANDED
            if (
                mail.value is not None
                and len(mail.value.claim_ids) >= CLAIM_IDS_KEPT
                and mail.value.ts >= message.created
            ):
                return ClaimFate.AMBIGUOUS  # the mailbox cursor keeps no time per claim id
            return ClaimFate.NEVER if lapsed else ClaimFate.NOT_YET
        kind = kind_of_source(message.source)
        assert kind is not None  # every source but mail is a kind of conversation
        chat = await resolve_cursor(self.backend, kind, message.chat_id)
        if chat.outcome is ReadOutcome.UNRESOLVED:
            return ClaimFate.UNKNOWN
        cursor = chat.value
        if cursor is not None and cursor.has_claim(entry.claim):
            return ClaimFate.LANDED
        if (
            cursor is not None
            and len(cursor.claims) >= CLAIM_MARKS_KEPT
            and cursor.is_recorded(message.message_id)
            and min(m.at for m in cursor.claims) > entry.at
        ):
            return ClaimFate.AMBIGUOUS
        return ClaimFate.NEVER if lapsed else ClaimFate.NOT_YET


def note_dropped_intent(
    fate: ClaimFate, host_id: str, entry: PendingDelivery, metrics: DeliveryMetrics
) -> None:
    """An intent settled as ``never`` or ``ambiguous`` leaves its record: counted, and the ambiguous one
    (which may be a message lost) logged by id, so an operator can point the agent at it."""
    metrics.lapsed_intents.labels(fate=fate.value).inc()
    if fate is ClaimFate.AMBIGUOUS:
        log.error(
            "an intent's claim can no longer be told from the cursor; not pushed, so it may be lost (read "
            "it with catch_up or read_chat)",
            extra={
                "host_id": host_id,
                "chat_id": entry.message.chat_id,
                "message_id": entry.message.message_id,
            },
        )


@dataclass
class Settlement:
    """What one look at a host's unsettled intents found: the claims that landed, those that never
    will, and how soon to look again (sooner than the refresh while some are still open)."""

    landed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    again_in_s: float = float("inf")


async def settle_intents(
    record: HostRecord,
    lookup: ClaimLookup,
    *,
    in_flight: Callable[[str], bool],
    now: datetime,
    retry_s: float,
    metrics: DeliveryMetrics,
    young_s: float = SETTLE_AFTER_S,
) -> Settlement:
    """Each intent's claim fate, asked of the ledger's cursors; a young intent (under ``young_s``)
    and one still being written here (``in_flight``) are left to the replica writing its claim. One
    whose claim has not landed yet (it may never) is looked at again after ``retry_s``. An inbox call
    waiting for the message passes ``young_s`` 0: a cursor read then costs less than the wait."""
    found = Settlement()
    for entry in record.pending:
        if entry.state is not EntryState.INTENT:
            continue
        if now - entry.at < timedelta(seconds=young_s) and not entry.earlier_claims:
            found.again_in_s = min(found.again_in_s, young_s)
            continue
        for claim in entry.claims:
            if claim in found.landed | found.failed or in_flight(claim):
                continue
            # An earlier claim's intent was written before this one: it is no younger.
            fate = await lookup.fate(entry.model_copy(update={"claim": claim}), now)
            if fate in (ClaimFate.NOT_YET, ClaimFate.UNKNOWN):
                found.again_in_s = min(found.again_in_s, retry_s)
            if fate is ClaimFate.LANDED:
                found.landed.add(claim)
                break
            if fate in (ClaimFate.NEVER, ClaimFate.AMBIGUOUS):
                found.failed.add(claim)
                if all(c in found.failed for c in entry.claims):
                    note_dropped_intent(fate, record.host_id, entry, metrics)
    return found
