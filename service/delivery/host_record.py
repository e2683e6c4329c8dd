"""One host's delivery record: what was claimed for it and not yet acknowledged (issue 22, SPEC §10).

Stored at ``deliveries/<url-quoted host id>.json``, written only with If-Match (``if_absent`` for the
first), so every change below is a pure function of the record read and the writer retries on a
conflict. The shape::

    {"host_id": "laptop-1",
     "held_by": {"replica": "r2", "session": "9f3c…", "at": "…",    # who serves this host now, or null
                 "keep_s": null},       # an inbox host's calls: held for the retention window
     "pending": [{"source": "chat", "chat_id": "19:…", "message_id": "1764…",
                  "claim": "<claim id>", "state": "intent", "at": "…", "moved_from": null,
                  "seq": 7, "earlier_claims": [],   # intents it replaced whose claims may land
                  "message": {…the InboundMessage…}}],
     "acked": [["19:…", "1764…"], …],        # the newest ACKED_KEPT acknowledged keys
     "moved": [["19:…", "1763…"], …],        # the newest MOVED_KEPT keys handed to another host
     "next_seq": 8, "tag": "a3f9c1",          # an inbox host's cursors (service.delivery.inbox_rules)
     "moved_untold": 0}                        # moved out since the inbox host last heard of it

An entry is written *before* its claim (``state: intent``, naming the claim id the ledger is about to
write), so a replica that dies at any point after the claim leaves the message in this record. An intent
counts as claimed (``live``) once that claim id is found in the chat's or the mailbox's cursor; until
then it is never pushed by anyone but the replica writing the claim. ``acked`` and ``moved`` keep a late
or repeated acknowledgement from resurrecting or duplicating anything.

The message body is stored here until the host acknowledges it, as the interaction log stores it: the
container is the one place the fleet keeps what it owes a host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import Enum
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, ValidationError

from service.clock import as_utc
from service.domain.message import InboundMessage, MessageKey
from service.ledger.records.reads import CorruptValueError

RECORD_PREFIX = "deliveries/"
ACKED_KEPT = 512
MOVED_KEPT = 256
# A host owed more than this takes no new claims (its target is not alive for the hub), so a host that
# never acknowledges cannot grow its record without bound; what it would have taken stays unclaimed in
# Graph for another host.
MAX_PENDING = 200


def record_key(host_id: str) -> str:
    if not host_id:
        raise ValueError("host_id is empty; every delivery record belongs to one host")
    return f"{RECORD_PREFIX}{quote(host_id, safe='')}.json"


def host_of_record_key(key: str) -> str | None:
    if not key.startswith(RECORD_PREFIX) or not key.endswith(".json"):
        return None
    host_id = unquote(key[len(RECORD_PREFIX) : -len(".json")])
    return host_id if host_id and record_key(host_id) == key else None


class EntryState(str, Enum):
    INTENT = "intent"  # written before the claim: owed only if the claim id lands in the cursor
    LIVE = "live"  # the claim is known to have landed: owed to this host until it acknowledges


class PendingDelivery(BaseModel):
    # ``message`` is the one message type itself, stored as its fields (pydantic serialises the
    # dataclass): records written when a twin model held the same fields read back unchanged.
    model_config = ConfigDict(frozen=True)
    claim: str  # the claim id written (or about to be written) in the message's cursor
    state: EntryState
    at: datetime  # when the intent was written (or the entry moved here)
    message: InboundMessage
    moved_from: str | None = None
    moving_to: str | None = (
        None  # the sweep chose another host for it: owed there, never pushed from here
    )
    # Numbered in the record as entries arrive (``HostRecord.next_seq``): an inbox host's cursor names
    # the entries a call returned by these, so it stays a few characters long (service.delivery.inbox_rules).
    # 0: an entry written before entries were numbered.
    seq: int = 0
    # The claims of intents this one replaced that may still land (another replica's claim of the same
    # message from an older look at the cursor): until each is settled, any of them landing makes the
    # entry owed, and this intent's own claim failing falls back to them rather than dropping it.
    earlier_claims: tuple[str, ...] = ()

    @property
    def claims(self) -> tuple[str, ...]:
        """Every claim whose landing makes this entry owed: its own first."""
        return (self.claim, *self.earlier_claims)

    @property
    def movable(self) -> bool:
        """Moved at most once: what was moved in stays with its new host."""
        return self.moved_from is None

    @property
    def key(self) -> MessageKey:
        return self.message.key


class HeldBy(BaseModel):
    """The replica serving this host: since ``at`` (renewed while it serves), or until ``at`` once the
    session ended there (``active`` False)."""

    model_config = ConfigDict(frozen=True)
    replica: str
    session: str
    at: datetime
    active: bool = True
    # How long the hold counts from ``at`` when not the keeper's renewal bound: an inbox host's calls
    # hold it for the retention window (SPEC §11), since between two calls no replica serves it.
    keep_s: float | None = None


class HostRecord(BaseModel):
    model_config = ConfigDict(frozen=True)
    host_id: str
    held_by: HeldBy | None = None
    pending: tuple[PendingDelivery, ...] = ()
    acked: tuple[MessageKey, ...] = ()
    moved: tuple[MessageKey, ...] = ()
    next_seq: int = 1
    # Set at an inbox host's first call: its cursors carry it, so one host's cursor acknowledges nothing
    # in another's record.
    tag: str = ""
    # Entries moved to another host since the inbox host last heard of it: its next call reports the gap.
    moved_untold: int = 0

    def entry(self, key: tuple[str, str]) -> PendingDelivery | None:
        return next((e for e in self.pending if e.key == key), None)

    @property
    def full(self) -> bool:
        return len(self.pending) >= MAX_PENDING

    def settled_keys(self) -> frozenset[MessageKey]:
        return frozenset((*self.acked, *self.moved))

    def unseen_since(self, now: datetime, stale_after: timedelta) -> datetime | None:
        """Since when no replica serves this host; None while one does (its hold renewed within
        ``stale_after``). A host never held is unseen since its oldest entry."""
        holder = self.held_by
        if holder is not None and holder.active:
            if holder.keep_s is not None:
                stale_after = timedelta(seconds=holder.keep_s)
            return None if now - holder.at < stale_after else holder.at
        if holder is not None:
            return holder.at
        return min((e.at for e in self.pending), default=now)


def parse_host_record(text: str) -> HostRecord:
    try:
        return HostRecord.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise CorruptValueError(f"delivery record: {where}: {first['msg']}") from None


def render_host_record(record: HostRecord) -> str:
    return record.model_dump_json()


def empty_record(host_id: str) -> HostRecord:
    return HostRecord(host_id=host_id)


# --- the changes, each pure: the record read → the record to write ---


def _appended(
    record: HostRecord, kept: Sequence[PendingDelivery], added: Sequence[PendingDelivery]
) -> HostRecord:
    """``kept`` then ``added``, each added entry numbered next in the record."""
    first = record.next_seq
    numbered = [e.model_copy(update={"seq": first + i}) for i, e in enumerate(added)]
    return record.model_copy(
        update={"pending": (*kept, *numbered), "next_seq": first + len(numbered)}
    )


def with_intents(
    record: HostRecord,
    claim: str,
    messages: Sequence[InboundMessage],
    at: datetime,
    *,
    replacing: str | None = None,
) -> HostRecord:
    """``messages`` owed to this host if ``claim`` lands. An intent of the same message is replaced (a
    retried claim names a new claim id), and so is every intent of the claim this one ``replacing``
    retries: what that attempt held and this one does not, the other replica's claim won. A live entry
    stays: its claim landed, so this one cannot (a look at the cursor older than that claim)."""
    keys = {m.key for m in messages}
    have = record.settled_keys() | _live_keys(record)
    kept = [
        e
        for e in record.pending
        if e.state is EntryState.LIVE
        or (e.key not in keys and (replacing is None or e.claim != replacing))
    ]
    # An intent of another claim of the same message may still land (two replicas' looks at the
    # cursor): the new intent remembers it. One of the claim this one retries never will.
    earlier = {
        e.key: tuple(c for c in e.claims if c not in (replacing, claim))
        for e in record.pending
        if e.state is EntryState.INTENT and e.key in keys
    }
    added = [
        PendingDelivery(
            claim=claim,
            state=EntryState.INTENT,
            at=as_utc(at),
            message=m,
            earlier_claims=earlier.get(m.key, ()),
        )
        for m in messages
        if m.key not in have
    ]
    return _appended(record, kept, added)


def _live_keys(record: HostRecord) -> set[MessageKey]:
    return {e.key for e in record.pending if e.state is EntryState.LIVE}


def _with_landed(record: HostRecord, added: Sequence[PendingDelivery]) -> HostRecord:
    """``added`` (entries of claims that landed) in place of any intent of the same messages: the ledger
    claims a message once, so such an intent's claim can never land, and settling it must not take the
    message with it."""
    keys = {e.key for e in added}
    return _appended(record, [e for e in record.pending if e.key not in keys], added)


def owed_after_claim(
    record: HostRecord, claim: str, messages: Sequence[InboundMessage], at: datetime
) -> HostRecord:
    """``messages``, claimed already (under a claim no intent of this host named), owed to it from now on:
    what a sponsor wait of this host took and could not answer with. A message it is owed or had is left
    out; an intent of it (another claim's, which lost to this one) is replaced."""
    have = _live_keys(record) | record.settled_keys()
    added = [
        PendingDelivery(claim=claim, state=EntryState.LIVE, at=as_utc(at), message=m)
        for m in messages
        if m.key not in have
    ]
    return _with_landed(record, added)


def without_claim(record: HostRecord, claim: str) -> HostRecord:
    """Less the intents of a claim that is known not to have landed (an intent that replaced another
    claim's of the same message falls back to it)."""
    return settled_intents(record, (), (claim,))


def settled_intents(record: HostRecord, landed: Iterable[str], failed: Iterable[str]) -> HostRecord:
    """Intents with a claim id found in its cursor become live (under that claim); claims proven never
    to land leave their intents, which go once none of their claims may still land."""
    landed, failed = set(landed), set(failed)
    pending = []
    for e in record.pending:
        if e.state is EntryState.INTENT:
            won = next((c for c in e.claims if c in landed), None)
            if won is not None:
                e = e.model_copy(
                    update={"state": EntryState.LIVE, "claim": won, "earlier_claims": ()}
                )
            else:
                open_claims = [c for c in e.claims if c not in failed]
                if not open_claims:
                    continue
                if open_claims != list(e.claims):
                    e = e.model_copy(
                        update={"claim": open_claims[0], "earlier_claims": tuple(open_claims[1:])}
                    )
        pending.append(e)
    return record.model_copy(update={"pending": tuple(pending)})


def acknowledged(record: HostRecord, keys: Iterable[tuple[str, str]]) -> HostRecord:
    """Keys the host has: out of ``pending`` and into ``acked`` (a key it was never owed is noted too:
    a host may acknowledge a push a replica made before writing down its intent's fate)."""
    given = [MessageKey(k[0], k[1]) for k in keys]
    done = set(given)
    return record.model_copy(
        update={
            "pending": tuple(e for e in record.pending if e.key not in done),
            "acked": tuple(dict.fromkeys((*record.acked, *given)))[-ACKED_KEPT:],
        }
    )


def moving(record: HostRecord, keys: Iterable[tuple[str, str]], to_host: str) -> HostRecord:
    """The sweep's first write: these go to ``to_host`` (an entry already bound elsewhere keeps its host)."""
    chosen = set(keys)
    return record.model_copy(
        update={
            "pending": tuple(
                e.model_copy(update={"moving_to": to_host})
                if e.key in chosen and e.moving_to is None
                else e
                for e in record.pending
            )
        }
    )


def moved_out(record: HostRecord, keys: Iterable[tuple[str, str]]) -> HostRecord:
    moved = [MessageKey(*k) for k in keys]
    done = set(moved)
    taken = sum(1 for e in record.pending if e.key in done)
    return record.model_copy(
        update={
            "pending": tuple(e for e in record.pending if e.key not in done),
            "moved": tuple(dict.fromkeys((*record.moved, *moved)))[-MOVED_KEPT:],
            "moved_untold": record.moved_untold + taken,
        }
    )


def moved_in(
    record: HostRecord, entries: Sequence[PendingDelivery], from_host: str, at: datetime
) -> HostRecord:
    """The sweep's second write: ``entries`` (live at ``from_host``) owed here; one this host is owed or
    had already is left out, and one it holds an intent of (another claim's, which lost) replaces it."""
    have = _live_keys(record) | record.settled_keys()
    added = [
        e.model_copy(
            update={
                "moved_from": from_host,
                "moving_to": None,
                "at": as_utc(at),
                "state": EntryState.LIVE,
            }
        )
        for e in entries
        if e.key not in have
    ]
    return _with_landed(record, added)


def held(record: HostRecord, holder: HeldBy | None) -> HostRecord:
    return record.model_copy(update={"held_by": holder})


__all__ = [
    "ACKED_KEPT",
    "MAX_PENDING",
    "RECORD_PREFIX",
    "EntryState",
    "HeldBy",
    "HostRecord",
    "PendingDelivery",
    "acknowledged",
    "empty_record",
    "held",
    "host_of_record_key",
    "moved_in",
    "moved_out",
    "moving",
    "parse_host_record",
    "record_key",
    "render_host_record",
    "settled_intents",
    "with_intents",
    "without_claim",
]
