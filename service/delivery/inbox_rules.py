"""An inbox host's calls, as functions of its delivery record (SPEC §11): what a call returns, what
its cursor acknowledges, and the hold that keeps the host a delivery target between calls. No I/O:
service.delivery.inbox reads and writes the record.

A cursor is ``<record tag>.<numbers>``, the entries' ``seq`` numbers of what one call returned, in
ranges (``a3f9c1.7-9,12``). It names exactly what that call returned, never "everything up to N": an
intent numbered before a returned entry may still be waiting for its claim to land, and an offset
would acknowledge it unseen. The tag (set at the host's first call) keeps a cursor from one host's
record from acknowledging anything in another's. A cursor is short on purpose: the model copies it
from one call's result into the next call's arguments.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.delivery.host_record import (
    EntryState,
    HeldBy,
    HostRecord,
    PendingDelivery,
    acknowledged,
    held,
)
from service.domain.message import MessageKey

INBOX_SESSION = "inbox"  # ``held_by.session`` of a hold an inbox call wrote
_CURSOR = re.compile(r"([0-9a-f]{6})\.((?:\d{1,9}(?:-\d{1,9})?)(?:,\d{1,9}(?:-\d{1,9})?)*)?")
MAX_CURSOR_SEQS = 1000


class CursorError(ValueError):
    """A cursor this host's record did not give out; the message says what to do."""


def render_cursor(tag: str, seqs: Iterable[int]) -> str:
    ordered = sorted(set(seqs))
    ranges: list[str] = []
    start = prev = None
    for n in ordered:
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
    return f"{tag}.{','.join(ranges)}"


def parse_cursor(text: str, record: HostRecord) -> frozenset[int]:
    """The entry numbers ``text`` names, checked against this host's record."""
    found = _CURSOR.fullmatch(text.strip())
    if found is None:
        raise CursorError(
            "cursor is not one receive_messages returned; pass the `cursor` of the previous result "
            "exactly, or call without one (what was not acknowledged comes back)"
        )
    if found.group(1) != record.tag:
        raise CursorError(
            "cursor belongs to another host or to a record that was reset; call without one "
            "(what was not acknowledged comes back)"
        )
    seqs: set[int] = set()
    for part in (found.group(2) or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first or last >= record.next_seq or len(seqs) + last - first >= MAX_CURSOR_SEQS:
            raise CursorError(
                "cursor names messages this host was never given; call without one "
                "(what was not acknowledged comes back)"
            )
        seqs.update(range(first, last + 1))
    return frozenset(seqs)


def returnable(entry: PendingDelivery, landed_here: Collection[MessageKey]) -> bool:
    """An entry a call may return: claimed for this host (its intent's claim landed, as its record or
    this replica's own claim says) and not bound for another host by the sweep."""
    if entry.moving_to is not None:
        return False
    return entry.state is EntryState.LIVE or entry.key in landed_here


def batch(
    record: HostRecord, limit: int, landed_here: Collection[MessageKey] = ()
) -> tuple[list[PendingDelivery], bool]:
    """What one call returns, oldest first, and whether more is owed beyond ``limit``."""
    due = sorted((e for e in record.pending if returnable(e, landed_here)), key=lambda e: e.seq)
    return due[:limit], len(due) > limit


@dataclass(frozen=True)
class Call:
    """One inbox call's write: what its cursor acknowledged, and the hold it renews when due."""

    seqs: frozenset[int]
    holder: HeldBy
    renew_after: timedelta
    new_tag: str  # used only when the record has none yet

    def apply(self, record: HostRecord) -> HostRecord:
        keys = [e.key for e in record.pending if e.seq in self.seqs and e.seq > 0]
        changed = acknowledged(record, keys) if keys else record
        if not changed.tag:
            changed = changed.model_copy(update={"tag": self.new_tag})
        changed = numbered(changed)
        if changed.moved_untold:
            changed = changed.model_copy(update={"moved_untold": 0})
        if hold_due(changed, self.holder, self.renew_after):
            changed = held(changed, self.holder)
        return changed


def numbered(record: HostRecord) -> HostRecord:
    """Entries written before entries were numbered get the next numbers (once)."""
    if all(e.seq > 0 for e in record.pending):
        return record
    seq = record.next_seq
    pending = []
    for e in record.pending:
        if e.seq == 0:
            e, seq = e.model_copy(update={"seq": seq}), seq + 1
        pending.append(e)
    return record.model_copy(update={"pending": tuple(pending), "next_seq": seq})


def hold_due(record: HostRecord, holder: HeldBy, renew_after: timedelta) -> bool:
    """Whether a call renews the host's hold: none yet, another kind or replica, or older than
    ``renew_after`` (written at most that often while the host calls here, not at every call)."""
    current = record.held_by
    return (
        current is None
        or not current.active
        or current.session != holder.session
        or current.replica != holder.replica
        or current.keep_s != holder.keep_s
        or holder.at - current.at >= renew_after
    )


def inbox_hold(replica_id: str, now: datetime, retention_s: float) -> HeldBy:
    return HeldBy(
        replica=replica_id, session=INBOX_SESSION, at=now, active=True, keep_s=retention_s
    )


def is_inbox_host(record: HostRecord, now: datetime) -> bool:
    """Whether the record is an inbox host's that called within its retention window: a delivery
    target on every replica (SPEC §11)."""
    holder = record.held_by
    return (
        holder is not None
        and holder.session == INBOX_SESSION
        and holder.active
        and holder.keep_s is not None
        and now - holder.at < timedelta(seconds=holder.keep_s)
    )


def calling_elsewhere(record: HostRecord, replica_id: str, now: datetime, busy_s: float) -> bool:
    """Whether the host's calls go to another replica now (its hold renewed there within ``busy_s``):
    that replica claims for it and wakes its call at once; claiming here too would make the call wait
    for its next look at the record."""
    holder = record.held_by
    return (
        is_inbox_host(record, now)
        and holder is not None
        and holder.replica != replica_id
        and now - holder.at < timedelta(seconds=busy_s)
    )
