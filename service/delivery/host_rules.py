"""The keeper's decisions about one acknowledging host, as functions of its record and this replica's
pushes: whether this replica should hold the host (and say so in the record), and whether an owed
entry is pushed now. No I/O: service.delivery.host_keeper reads and writes the record.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from service.delivery.deliveries import Push
from service.delivery.claim_lookup import Settlement
from service.delivery.host_record import (
    EntryState,
    HeldBy,
    HostRecord,
    PendingDelivery,
    held,
    settled_intents,
)

# The first push and one redelivery; a host that still does not acknowledge is alerted on.
MAX_PUSHES = 2


def held_here(record: HostRecord, replica_id: str, session_id: str) -> bool:
    """Whether the record says this replica's session serves the host now."""
    holder = record.held_by
    return (
        holder is not None
        and holder.active
        and holder.replica == replica_id
        and holder.session == session_id
    )


def hold_change(
    record: HostRecord,
    replica_id: str,
    session_id: str,
    *,
    streaming: bool,
    now: datetime,
    renew_after: timedelta,
) -> tuple[bool, bool]:
    """(renew, unhold): a host whose push stream is open here is held by this replica's session,
    renewed every ``renew_after``; one whose stream is gone is no longer held here (the sweep may then
    move what it is owed)."""
    holder = record.held_by
    renew = streaming and (
        holder is None
        or not holder.active
        or holder.session != session_id
        or holder.replica != replica_id
        or now - holder.at >= renew_after
    )
    unhold = not streaming and held_here(record, replica_id, session_id)
    return renew, unhold


def refresh_due(record: HostRecord, replica_id: str, session_id: str, *, streaming: bool) -> bool:
    """Whether the record must be read and written before the refresh is due: its hold says this
    replica's session serves the host, and the host's stream is gone."""
    return not streaming and held_here(record, replica_id, session_id)


def settled_and_held(
    record: HostRecord, settled: Settlement, mine: HeldBy, *, renew: bool, unhold: bool
) -> HostRecord:
    """The record with the settled intents' fates and this replica's hold (``hold_change``): applied
    to whatever record each write attempt read, so a hold another replica took meanwhile stays."""
    record = settled_intents(record, settled.landed, settled.failed)
    if renew or (unhold and held_here(record, mine.replica, mine.session)):
        return held(record, mine)
    return record


def push_due(
    entry: PendingDelivery, mark: Push | None, session_id: str, now: float, redeliver_after_s: float
) -> bool:
    """Whether the host's session is pushed this owed entry now: not one the sweep gave to another
    host; once per session, then again after ``redeliver_after_s`` unacknowledged, MAX_PUSHES in all;
    an intent only by the replica whose claim it is until its claim is known to have landed."""
    if entry.moving_to is not None:
        return False
    if mark is not None and mark.session_id == session_id:
        return mark.count < MAX_PUSHES and now - mark.last_at >= redeliver_after_s
    return mark is not None or entry.state is not EntryState.INTENT


def redelivery_reason(mark: Push, session_id: str) -> str:
    return "unacknowledged" if mark.session_id == session_id else "new_session"
