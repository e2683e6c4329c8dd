"""Property tests of the delivery record's rules (SPEC §10, §11), over the pure functions only.

A small fleet is modelled: three hosts, each with its delivery record (``HostRecord``, the only durable
state), two replicas whose memory (claims in flight, sponsor waits, the sweep's move) dies with them,
the ledger (each message claimed at most once: a claim lands only if none of its messages is claimed
yet), and what each host was pushed. Every operation is one ``Op`` and ``Fleet.apply`` is the one place
that carries it out, with the record changes the service makes, in the order it makes them:

- a claim for a host (service.delivery.claim_intents): the intent (``with_intents``), the claim write
  (landed or lost), the writer's take-back of a lost claim (``without_claim``); a replica dying between
  any two leaves an intent that is settled from the cursor (``settled_intents``) as landed or, once
  proven never to land, failed;
- a sponsor wait's claim, answered or owed to its host (``owed_after_claim``);
- a push (nothing durable; ``push_due`` decides what may be pushed), a hand-over the host never got
  (nothing acknowledged), and acknowledgements (``acknowledged``): late, repeated, duplicated, and of
  keys never owed;
- the sweep's move (service/workers/delivery_sweep.py): intents settled, ``moving`` on the stale host's
  record, then ``moved_in`` on the destination's, then ``moved_out`` on the stale host's, a death (or a
  failed write) possible between any two, the next pass finishing to the same host (for a host
  served again too).

After every step (``Fleet.check``): a message reaches (is pushed to, acknowledged by, taken out of a
record by an acknowledgement of) at most one host, or only the two hosts of its move; nothing claimed
is lost (pending in a record, or acknowledged); a message moves in at most once, and only as its move
says; no record holds one message twice, or pending and acknowledged/moved at once, or again after it
acknowledged or moved it away; acked/moved stay bounded. And liveness (``Fleet.check_drains``): once
every host is served and everything runs its course, no record owes anything.

``Fleet`` is plain data, so a scripted sequence of ops reproduces any case hypothesis finds (see the
tests after the machine); a new operation is one more ``Op`` and one more case in ``Fleet.apply``.

A claim's fate is modelled only as the cursor proves it (landed, or never): the one documented loss,
an intent whose claim id was pushed out of its cursor before anyone settled it (``ClaimFate.AMBIGUOUS``),
is not generated. A sponsor wait's claim lives in its replica's memory until it is answered or owed;
one lost with its replica is not in any record and is outside "nothing claimed is lost".
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from service.delivery import host_record
from service.delivery.choice import allot, choose, delivery_order
from service.delivery.host_record import (
    EntryState,
    HostRecord,
    PendingDelivery,
    acknowledged,
    empty_record,
    moved_in,
    moved_out,
    moving,
    owed_after_claim,
    settled_intents,
    with_intents,
    without_claim,
)
from service.delivery.host_rules import push_due
from service.delivery.inbox_rules import Call, batch, inbox_hold
from service.delivery.targets import Handover, TargetKind
from service.domain.message import InboundMessage, MessageKey, Source

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
HOSTS = ("h1", "h2", "h3")
REPLICAS = ("r1", "r2")


def _message(chat: str, mid: str, minute: int) -> InboundMessage:
    source = Source.EMAIL if chat == "email" else Source.CHAT
    return InboundMessage(
        source, chat, mid, "u1", "Ada", T0 + timedelta(minutes=minute), f"body {mid}"
    )


# Two chats sharing message ids (a key is the pair) and the mailbox.
MESSAGES = {
    m.key: m
    for m in (
        *(_message("19:a", str(1000 + i), i) for i in range(4)),
        *(_message("19:b", str(1000 + i), i) for i in range(4)),
        _message("email", "AAMk-1", 1),
        _message("email", "AAMk-2", 2),
    )
}
BY_CHAT = {
    chat: tuple(k for k in MESSAGES if k.chat_id == chat) for chat in ("19:a", "19:b", "email")
}
NEVER_OWED = (
    MessageKey("19:a", "9999"),
    MessageKey("19:b", "9999"),
    MessageKey("19:c", "1000"),
    MessageKey("email", "AAMk-x"),
)

# --- the operations ---


@dataclass(frozen=True)
class WriteIntent:
    host: str
    replica: str
    keys: tuple[MessageKey, ...]


@dataclass(frozen=True)
class WriteClaim:
    claim: str
    push_now: bool  # the writer's hand-over right after the claim (the host's session is here)


@dataclass(frozen=True)
class AfterClaim:
    claim: str  # the writer learns the claim's outcome: a lost claim's intents are taken back


@dataclass(frozen=True)
class SettleIntents:
    host: str  # its keeper (or the sweep) settles its intents from the cursors


@dataclass(frozen=True)
class ClaimForWait:
    host: str
    replica: str
    keys: tuple[MessageKey, ...]


@dataclass(frozen=True)
class EndWait:
    wait: str
    answered: bool  # the tool result carried them; else they are owed to the wait's host


@dataclass(frozen=True)
class PushTo:
    host: str
    keys: tuple[MessageKey, ...]
    received: bool  # False: a hand-over the host never got (cancelled, timed out)


@dataclass(frozen=True)
class Acknowledge:
    host: str
    keys: tuple[MessageKey, ...]


@dataclass(frozen=True)
class InboxCall:
    """A ``receive_messages`` call of an inbox host (service.delivery.inbox): its cursor acknowledges
    what the host's last received result returned, then it returns what the record owes. ``received``
    False: the host cancelled the call or it timed out, so its cursor never reaches a later call."""

    host: str
    received: bool


@dataclass(frozen=True)
class SetServed:
    host: str
    served: bool


@dataclass(frozen=True)
class Die:
    replica: str


@dataclass(frozen=True)
class SweepPass:
    from_host: str
    to_host: str | None  # the live destination, if any
    replica: str


@dataclass(frozen=True)
class MoveIn:
    pass


@dataclass(frozen=True)
class MoveOut:
    pass


@dataclass(frozen=True)
class MoveFails:
    pass  # the sweep's next record write fails: the move is left to the next pass


Op = (
    InboxCall
    | WriteIntent
    | WriteClaim
    | AfterClaim
    | SettleIntents
    | ClaimForWait
    | EndWait
    | PushTo
    | Acknowledge
    | SetServed
    | Die
    | SweepPass
    | MoveIn
    | MoveOut
    | MoveFails
)

# --- the fleet ---


@dataclass
class Claim:
    host: str
    replica: str
    keys: tuple[MessageKey, ...]
    written: bool = False


@dataclass
class Wait:
    host: str
    replica: str
    keys: tuple[MessageKey, ...]


@dataclass
class Move:
    from_host: str
    to_host: str
    replica: str
    entries: tuple[PendingDelivery, ...]
    moved_in: bool = False


@dataclass(repr=False)
class Fleet:
    records: dict[str, HostRecord] = field(
        default_factory=lambda: {h: empty_record(h) for h in HOSTS}
    )
    served: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(HOSTS, True))
    # the ledger: message -> the claim that won it; the claims proven landed or proven never to land
    ledger: dict[MessageKey, str] = field(default_factory=dict)
    landed: set[str] = field(default_factory=set)
    never: set[str] = field(default_factory=set)
    # replica memory
    claims: dict[str, Claim] = field(default_factory=dict)
    waits: dict[str, Wait] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)  # the sweep's pass in progress, in order
    # what happened, for the invariants
    owed: set[MessageKey] = field(default_factory=set)  # claimed, owed through a record
    got: dict[str, set[MessageKey]] = field(default_factory=lambda: {h: set() for h in HOSTS})
    cursors: dict[str, frozenset[int]] = field(default_factory=dict)  # an inbox host's last cursor
    reached: dict[MessageKey, set[str]] = field(default_factory=dict)  # hosts a push reached
    delivered: dict[MessageKey, list[str]] = field(default_factory=dict)  # acks that took it owed
    move_of: dict[MessageKey, tuple[str, str]] = field(default_factory=dict)
    moved_in_times: Counter[MessageKey] = field(default_factory=Counter)
    settled_at: dict[str, set[MessageKey]] = field(
        default_factory=lambda: {h: set() for h in HOSTS}
    )
    next_id: int = 0
    now: datetime = T0
    bounded_lists: bool = False  # acked/moved trimmed to a few keys: no checks of what they forget

    # --- the one place each operation is carried out ---

    def apply(self, op: Op) -> None:
        self.now += timedelta(seconds=7)
        match op:
            case WriteIntent(host, replica, keys):
                claim = f"c{self._id()}"
                messages = [MESSAGES[k] for k in keys]
                self.claims[claim] = Claim(host, replica, keys)
                self._update(host, lambda r: with_intents(r, claim, messages, self.now))
            case WriteClaim(claim, push_now):
                self._write_claim(claim, push_now)
            case AfterClaim(claim):
                done = self.claims.pop(claim)
                if claim in self.never:
                    self._update(done.host, lambda r: without_claim(r, claim))
            case SettleIntents(host):
                self._settle(host)
            case ClaimForWait(host, replica, keys):
                if not any(k in self.ledger for k in keys):  # the ledger's compare-and-swap
                    wait = f"w{self._id()}"
                    self.ledger.update(dict.fromkeys(keys, wait))
                    self.waits[wait] = Wait(host, replica, keys)
            case EndWait(wait, answered):
                self._end_wait(self.waits.pop(wait), answered)
            case PushTo(host, keys, received):
                if received:
                    self._reach(host, keys)
            case Acknowledge(host, keys):
                self._acknowledge(host, keys)
            case InboxCall(host, received):
                self._inbox_call(host, received)
            case SetServed(host, served):
                self.served[host] = served
            case Die(replica):
                self._die(replica)
            case SweepPass(from_host, to_host, replica):
                self._sweep(from_host, to_host, replica)
            case MoveIn():
                move = self.moves[0]
                entries, source = move.entries, move.from_host
                before = {e.key for e in self.records[move.to_host].pending}
                self._update(move.to_host, lambda r: moved_in(r, entries, source, self.now))
                self.moved_in_times.update(
                    {e.key for e in self.records[move.to_host].pending} - before
                )
                move.moved_in = True
            case MoveOut():
                move = self.moves.pop(0)
                out = [e.key for e in move.entries]
                self._update(move.from_host, lambda r: moved_out(r, out))
                self.settled_at[move.from_host].update(out)
            case MoveFails():
                self.moves.pop(0)

    # --- the parts of apply ---

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _update(self, host: str, change: Callable[[HostRecord], HostRecord]) -> None:
        """One conditional write of a record: the change applied to the record as it is now."""
        self.records[host] = change(self.records[host])

    def _write_claim(self, claim: str, push_now: bool) -> None:
        c = self.claims[claim]
        c.written = True
        if any(k in self.ledger for k in c.keys):
            self.never.add(claim)  # lost its compare-and-swap
            return
        self.ledger.update(dict.fromkeys(c.keys, claim))
        self.landed.add(claim)
        self.owed.update(c.keys)
        if push_now and self.served[c.host]:
            self._reach(c.host, c.keys)  # the hub hands each reserved message to its host's target

    def _settle(self, host: str) -> HostRecord:
        self._update(host, lambda r: settled_intents(r, self.landed, self.never))
        return self.records[host]

    def _end_wait(self, wait: Wait, answered: bool) -> None:
        if answered:
            self._reach(wait.host, wait.keys)
            return
        messages = [MESSAGES[k] for k in wait.keys]
        claim = f"wait-{self._id()}"
        self._update(wait.host, lambda r: owed_after_claim(r, claim, messages, self.now))
        self.owed.update(wait.keys)

    def _reach(self, host: str, keys: Sequence[MessageKey]) -> None:
        for k in keys:
            self.got[host].add(k)
            self.reached.setdefault(k, set()).add(host)

    def _inbox_call(self, host: str, received: bool) -> None:
        """Acknowledged by the cursor's numbers (inbox_rules.Call), as _acknowledge does by keys."""
        seqs = self.cursors.get(host, frozenset())
        pending = self.records[host].pending
        taken = {e.key for e in pending if e.seq in seqs and self._claimed(e)}
        hold = inbox_hold("r", self.now, 3600.0)
        self._update(host, Call(seqs, hold, timedelta(seconds=60), "a1b2c3").apply)
        for k in taken:
            self.delivered.setdefault(k, []).append(host)
        self.settled_at[host].update(e.key for e in pending if e.seq in seqs)
        returned, _ = batch(self.records[host], limit=5)
        if received:
            self._reach(host, [e.key for e in returned])
            self.cursors[host] = frozenset(e.seq for e in returned)

    def _claimed(self, entry: PendingDelivery) -> bool:
        """Whether the host was owed this entry: live, or an intent one of whose claims landed. An
        intent that replaced another claim's intent of the message keeps that claim in
        ``earlier_claims`` (host_record.with_intents), and the earlier one landing is the message
        owed here under whichever claim id the entry names first: an acknowledgement taking it is a
        delivery. Counting only ``entry.claim`` lost that delivery from ``delivered``, and once the
        acked list was trimmed past the key nothing showed the message had ever arrived."""
        return entry.state is EntryState.LIVE or any(c in self.landed for c in entry.claims)

    def _acknowledge(self, host: str, keys: Sequence[MessageKey]) -> None:
        # What the acknowledgement took that the host was owed (an intent none of whose claims
        # landed is no delivery: with the acked list trimmed, a stale intent can sit under a repeat).
        taken = {
            e.key for e in self.records[host].pending if e.key in set(keys) and self._claimed(e)
        }
        self._update(host, lambda r: acknowledged(r, keys))
        for k in taken:
            self.delivered.setdefault(k, []).append(host)
        self.settled_at[host].update(keys)

    def _die(self, replica: str) -> None:
        for claim, c in list(self.claims.items()):
            if c.replica == replica:
                del self.claims[claim]
                if not c.written:
                    self.never.add(claim)  # never sent: proven so once its intent lapses
        for wait, w in list(self.waits.items()):
            if w.replica == replica:
                del self.waits[wait]  # lost with the replica's memory (at most once)
        self.moves = [m for m in self.moves if m.replica != replica]

    def _sweep(self, host: str, to_host: str | None, replica: str) -> None:
        """DeliverySweep.sweep for one host, up to its first move's writes: a host gone away has its
        entries bound to ``to_host``; any host has the moves begun before finished."""
        record = self._settle(host)
        owed = [e for e in record.pending if e.state is EntryState.LIVE and e.movable]
        bound = [e for e in owed if e.moving_to is not None]
        free = [e for e in owed if e.moving_to is None]
        if free and to_host is not None and not self.served[host]:
            keys = [e.key for e in free]
            self._update(host, lambda r: moving(r, keys, to_host))
            bound = [e for e in self.records[host].pending if e.moving_to is not None]
            for e in bound:
                self.move_of.setdefault(e.key, (host, to_host))
        for target in dict.fromkeys(e.moving_to for e in bound if e.moving_to is not None):
            entries = tuple(e for e in bound if e.moving_to == target)
            self.moves.append(Move(host, target, replica, entries))

    # --- what may be done now (the machine draws from these) ---

    def pushable(self, host: str) -> list[MessageKey]:
        """What a replica serving the host pushes from its record (no push of it in memory)."""
        return [e.key for e in self.records[host].pending if push_due(e, None, "s", 0.0, 15.0)]

    def remembering(self) -> list[str]:
        """The replicas holding something in memory: a death of another changes nothing here."""
        held: list[Claim | Wait | Move] = [*self.claims.values(), *self.waits.values(), *self.moves]
        return sorted({m.replica for m in held})

    def sweeps(self, host: str) -> bool:
        """Whether a sweep pass moves this host's entries: it went away and is owed something, or a
        move of its entries was begun and not finished."""
        pending = self.records[host].pending
        return (not self.served[host] and bool(pending)) or any(e.moving_to for e in pending)

    def swept(self) -> list[str]:
        return [h for h in HOSTS if self.sweeps(h)]

    def __repr__(self) -> str:
        owed = {
            h: [(*e.key, e.claim, e.state.value, e.moving_to) for e in r.pending]
            for h, r in self.records.items()
        }
        return f"Fleet(pending={owed}, ledger={self.ledger}, served={self.served})"

    def copy(self) -> Fleet:
        """A fleet that changes apart from this one (the records and entries are immutable)."""
        return replace(
            self,
            records=dict(self.records),
            served=dict(self.served),
            ledger=dict(self.ledger),
            landed=set(self.landed),
            never=set(self.never),
            claims={c: replace(v) for c, v in self.claims.items()},
            waits=dict(self.waits),
            moves=[replace(m) for m in self.moves],
            owed=set(self.owed),
            got={h: set(v) for h, v in self.got.items()},
            cursors=dict(self.cursors),
            reached={k: set(v) for k, v in self.reached.items()},
            delivered={k: list(v) for k, v in self.delivered.items()},
            move_of=dict(self.move_of),
            moved_in_times=Counter(self.moved_in_times),
            settled_at={h: set(v) for h, v in self.settled_at.items()},
        )

    def settled_down(self) -> Fleet:
        """A copy of the fleet once everything has run its course: every replica's memory gone (each
        claim's fate then known), every host served and staying so, each record's intents settled, a
        sweep pass over every host that has something, and each host pushed all it is owed and
        acknowledging it."""
        fleet = self.copy()
        ops: list[Op] = [*map(Die, REPLICAS), *(SetServed(h, True) for h in HOSTS)]
        for op in ops:
            fleet.apply(op)
        for host in HOSTS:
            if fleet.sweeps(host):
                fleet.apply(SweepPass(host, None, REPLICAS[0]))
            while fleet.moves:
                fleet.apply(MoveOut() if fleet.moves[0].moved_in else MoveIn())
        for host in HOSTS:
            fleet.apply(SettleIntents(host))
            if keys := tuple(fleet.pushable(host)):
                fleet.apply(PushTo(host, keys, received=True))
                fleet.apply(Acknowledge(host, keys))
        return fleet

    # --- the invariants ---

    def check_drains(self) -> None:
        """Liveness: once every host is served, nothing stays owed (an intent settles, an owed entry is
        pushed and acknowledged, a move begun is finished)."""
        if not any(r.pending for r in self.records.values()):
            return
        down = self.settled_down()
        down.check()
        left = {h: [e.key for e in r.pending] for h, r in down.records.items()}
        assert not any(left.values()), f"still owed once everything ran its course: {left}"

    def check(self) -> None:
        pending = {h: {e.key for e in r.pending} for h, r in self.records.items()}
        acked = {h: set(r.acked) for h, r in self.records.items()}
        for k in MESSAGES:
            self._check_message(
                k, {h for h in HOSTS if k in pending[h]}, {h for h in HOSTS if k in acked[h]}
            )
        for host, record in self.records.items():
            self._check_record(host, record)

    def _check_message(self, k: MessageKey, pending_at: set[str], acked_by: set[str]) -> None:
        allowed = set(self.move_of[k]) if k in self.move_of else None
        for what, hosts in (
            ("acknowledged by", acked_by),
            ("pushed to", self.reached.get(k, set())),
            ("taken out of pending by acknowledgements of", set(self.delivered.get(k, []))),
        ):
            if allowed is None:
                assert len(hosts) <= 1, f"{k} {what} {sorted(hosts)} without a move"
            else:
                assert hosts <= allowed, f"{k} {what} {sorted(hosts)}; its move was {allowed}"
        if k in self.owed:
            assert pending_at or acked_by or k in self.delivered, f"{k} was claimed and is lost"
        if self.bounded_lists:
            # Trimmed lists forget: a move finished again after its destination acknowledged more
            # than ACKED_KEPT keys meanwhile moves the message in (and delivers it) a second time.
            return
        twice = [h for h, n in Counter(self.delivered.get(k, [])).items() if n > 1]
        assert not twice, f"{k} delivered twice to {twice}"
        assert self.moved_in_times[k] <= 1, f"{k} moved in {self.moved_in_times[k]} times"

    def _check_record(self, host: str, record: HostRecord) -> None:
        keys = [e.key for e in record.pending]
        assert len(keys) == len(set(keys)), f"{host} holds two entries of one message: {keys}"
        both = set(keys) & record.settled_keys()
        assert not both, f"{host} holds {both} pending and acknowledged/moved"
        if not self.bounded_lists:
            back = set(keys) & self.settled_at[host]
            assert not back, f"{host} owes {back} again after acknowledging or moving them"
        for e in record.pending:
            assert e.movable or e.moving_to is None, f"{host}: moved-in {e.key} moving again"
            if not e.movable:
                assert self.move_of.get(e.key) == (e.moved_from, host), f"{e.key} undocumented move"
        assert len(record.acked) <= host_record.ACKED_KEPT
        assert len(record.moved) <= host_record.MOVED_KEPT
        assert len(set(record.acked)) == len(record.acked), f"{host}: acked repeats a key"
        assert len(set(record.moved)) == len(record.moved), f"{host}: moved repeats a key"


# --- the machine: draws operations, the fleet carries them out, the invariants hold after each ---


class FleetMachine(RuleBasedStateMachine):
    # Two replicas writing intents of one message for one host at once (a stale look at the cursor,
    # or IntentAhead; inbox hosts are claimed for by any replica): see
    # test_racing_intents_of_one_message_for_one_host.
    racing_intents = True
    bounded_lists = False

    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet(bounded_lists=self.bounded_lists)

    def _racing(self, host: str, key: MessageKey) -> bool:
        """The host's record already holds the message under a claim that did or may land."""
        entry = self.fleet.records[host].entry(key)
        return entry is not None and entry.claim not in self.fleet.never

    def _some(self, data: st.DataObject, pool: Sequence[MessageKey], most: int) -> list[MessageKey]:
        return data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=most))

    @rule(
        data=st.data(),
        host=st.sampled_from(HOSTS),
        replica=st.sampled_from(REPLICAS),
        chat=st.sampled_from(sorted(BY_CHAT)),
    )
    def intent(self, data: st.DataObject, host: str, replica: str, chat: str) -> None:
        keys = list(dict.fromkeys(self._some(data, BY_CHAT[chat], 3)))
        if not self.racing_intents:
            keys = [k for k in keys if not self._racing(host, k)]
        if keys:
            self.fleet.apply(WriteIntent(host, replica, tuple(keys)))

    @rule(
        data=st.data(),
        host=st.sampled_from(HOSTS),
        replica=st.sampled_from(REPLICAS),
        chat=st.sampled_from(sorted(BY_CHAT)),
        push_now=st.booleans(),
    )
    def whole_claim(
        self, data: st.DataObject, host: str, replica: str, chat: str, push_now: bool
    ) -> None:
        """The common case, uninterrupted: intent, claim, and the writer's look at its outcome."""
        before = set(self.fleet.claims)
        self.intent(data, host, replica, chat)
        for claim in set(self.fleet.claims) - before:
            self.fleet.check()
            self.fleet.apply(WriteClaim(claim, push_now))
            self.fleet.check()
            self.fleet.apply(AfterClaim(claim))

    @precondition(lambda self: any(not c.written for c in self.fleet.claims.values()))
    @rule(data=st.data(), push_now=st.booleans())
    def claim(self, data: st.DataObject, push_now: bool) -> None:
        unwritten = sorted(c for c, v in self.fleet.claims.items() if not v.written)
        self.fleet.apply(WriteClaim(data.draw(st.sampled_from(unwritten)), push_now))

    @precondition(lambda self: any(c.written for c in self.fleet.claims.values()))
    @rule(data=st.data())
    def after_claim(self, data: st.DataObject) -> None:
        written = sorted(c for c, v in self.fleet.claims.items() if v.written)
        self.fleet.apply(AfterClaim(data.draw(st.sampled_from(written))))

    @rule(host=st.sampled_from(HOSTS))
    def settle(self, host: str) -> None:
        self.fleet.apply(SettleIntents(host))

    @precondition(lambda self: len(self.fleet.ledger) < len(MESSAGES))
    @rule(
        data=st.data(),
        host=st.sampled_from(HOSTS),
        replica=st.sampled_from(REPLICAS),
        chat=st.sampled_from(sorted(BY_CHAT)),
    )
    def wait_claims(self, data: st.DataObject, host: str, replica: str, chat: str) -> None:
        keys = tuple(dict.fromkeys(self._some(data, BY_CHAT[chat], 2)))
        self.fleet.apply(ClaimForWait(host, replica, keys))

    @precondition(lambda self: self.fleet.waits)
    @rule(data=st.data(), answered=st.booleans())
    def wait_ends(self, data: st.DataObject, answered: bool) -> None:
        self.fleet.apply(EndWait(data.draw(st.sampled_from(sorted(self.fleet.waits))), answered))

    @precondition(lambda self: any(self.fleet.served[h] and self.fleet.pushable(h) for h in HOSTS))
    @rule(data=st.data(), received=st.booleans())
    def push(self, data: st.DataObject, received: bool) -> None:
        host = data.draw(
            st.sampled_from([h for h in HOSTS if self.fleet.served[h] and self.fleet.pushable(h)])
        )
        keys = self._some(data, self.fleet.pushable(host), 3)
        self.fleet.apply(PushTo(host, tuple(keys), received))

    @rule(data=st.data(), host=st.sampled_from(HOSTS))
    def acknowledge(self, data: st.DataObject, host: str) -> None:
        if self.fleet.served[host]:
            keys = self._some(data, [*sorted(self.fleet.got[host]), *NEVER_OWED], 4)
            self.fleet.apply(Acknowledge(host, tuple(keys)))

    @rule(host=st.sampled_from(HOSTS), received=st.booleans())
    def inbox_call(self, host: str, received: bool) -> None:
        if self.fleet.served[host]:
            self.fleet.apply(InboxCall(host, received))

    @rule(host=st.sampled_from(HOSTS), served=st.booleans())
    def serve(self, host: str, served: bool) -> None:
        self.fleet.apply(SetServed(host, served))

    @precondition(lambda self: self.fleet.remembering())
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        self.fleet.apply(Die(data.draw(st.sampled_from(self.fleet.remembering()))))

    @precondition(lambda self: any(self.fleet.served[h] and self.fleet.pushable(h) for h in HOSTS))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """The common case: a host is pushed all it is owed and acknowledges it."""
        host = data.draw(
            st.sampled_from([h for h in HOSTS if self.fleet.served[h] and self.fleet.pushable(h)])
        )
        keys = tuple(self.fleet.pushable(host))
        self.fleet.apply(PushTo(host, keys, received=True))
        self.fleet.check()
        self.fleet.apply(Acknowledge(host, keys))

    @precondition(lambda self: not self.fleet.moves and self.fleet.swept())
    @rule(
        data=st.data(),
        replica=st.sampled_from(REPLICAS),
        writes=st.sampled_from(["first", "all", "all_but_last"]),
    )
    def sweep(self, data: st.DataObject, replica: str, writes: str) -> None:
        """A pass: its first write (``moving``), the rest left to the move rules; or all its writes;
        or all but its last (``moved_out``) before its replica dies."""
        from_host = data.draw(st.sampled_from(self.fleet.swept()))
        live = [
            h
            for h in HOSTS
            if h != from_host and self.fleet.served[h] and not self.fleet.records[h].full
        ]
        to_host = (
            data.draw(st.sampled_from(live)) if live and not self.fleet.served[from_host] else None
        )
        self.fleet.apply(SweepPass(from_host, to_host, replica))
        while writes != "first" and self.fleet.moves:
            self.fleet.check()
            if writes == "all_but_last" and self.fleet.moves[0].moved_in:
                self.fleet.apply(Die(replica))
            else:
                self.fleet.apply(MoveOut() if self.fleet.moves[0].moved_in else MoveIn())

    @precondition(lambda self: self.fleet.moves and not self.fleet.moves[0].moved_in)
    @rule()
    def move_in(self) -> None:
        self.fleet.apply(MoveIn())

    @precondition(lambda self: self.fleet.moves and self.fleet.moves[0].moved_in)
    @rule()
    def move_out(self) -> None:
        self.fleet.apply(MoveOut())

    @precondition(lambda self: self.fleet.moves)
    @rule()
    def move_fails(self) -> None:
        self.fleet.apply(MoveFails())

    @invariant()
    def holds(self) -> None:
        self.fleet.check()

    @invariant()
    def drains(self) -> None:
        self.fleet.check_drains()


MACHINE_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_fleet_keeps_its_delivery_promises() -> None:
    run_state_machine_as_test(FleetMachine, settings=MACHINE_SETTINGS)


class SmallListsMachine(FleetMachine):
    """The same fleet with acked/moved kept to a few keys, so that the lists are trimmed: a message
    acknowledged or moved away long ago is no longer in them (the production bounds, 512 and 256, are
    far past what the model can fill)."""

    bounded_lists = True


def test_the_acknowledged_and_moved_lists_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_record, "ACKED_KEPT", 3)
    monkeypatch.setattr(host_record, "MOVED_KEPT", 2)
    run_state_machine_as_test(
        SmallListsMachine, settings=settings(MACHINE_SETTINGS, max_examples=80)
    )


# --- cases the machine found, as scripts of the same operations ---

K = MessageKey("19:a", "1001")


def run(*ops: Op, bounded_lists: bool = False) -> Fleet:
    fleet = Fleet(bounded_lists=bounded_lists)
    for op in ops:
        fleet.apply(op)
        fleet.check()
    return fleet


def test_a_move_onto_an_intent_that_never_lands_is_not_lost() -> None:
    """Two hosts' replicas both reserve one message; h2's claim wins, h1's writer dies before taking
    its intent back. h2 goes away and the sweep moves the message to h1, whose record still holds the
    dead claim's intent of it: the move must not be skipped for it, or settling that intent drops the
    message from the only record that had it."""
    run(
        WriteIntent("h1", "r1", (K,)),  # c0
        WriteIntent("h2", "r2", (K,)),  # c1
        WriteClaim("c1", push_now=False),
        WriteClaim("c0", push_now=False),  # lost: the message is c1's
        Die("r1"),
        SetServed("h2", False),
        SweepPass("h2", "h1", "r2"),
        MoveIn(),
        MoveOut(),
        SettleIntents("h1"),
    )


def test_a_move_finished_again_after_its_destination_acknowledged_delivers_nothing_twice() -> None:
    run(
        WriteIntent("h1", "r1", (K,)),  # c0
        WriteClaim("c0", push_now=False),
        AfterClaim("c0"),
        SetServed("h1", False),
        SweepPass("h1", "h2", "r1"),  # settles c0, binds K to h2
        MoveIn(),
        PushTo("h2", (K,), received=True),
        Acknowledge("h2", (K,)),
        Die("r1"),  # before moved_out: K is still bound to h2 in h1's record
        SweepPass("h1", None, "r2"),  # the next pass finishes the same move
        MoveIn(),  # h2 has acknowledged K: nothing moves in
        MoveOut(),
    )


def test_a_sponsor_waits_message_owed_beside_an_intent_that_never_lands_is_not_lost() -> None:
    run(
        WriteIntent("h1", "r1", (K,)),  # c0
        ClaimForWait("h1", "r2", (K,)),  # w1 wins the message
        WriteClaim("c0", push_now=False),  # lost
        EndWait("w1", answered=False),  # owed to h1
        AfterClaim("c0"),  # c0's intent taken back
    )


def test_a_stale_intent_does_not_replace_what_a_host_is_owed() -> None:
    """A replica whose look at the cursor predates the claim writes an intent of a message its host
    is owed already (live); its claim loses, and taking that intent back must leave the owed entry."""
    run(
        WriteIntent("h1", "r1", (K,)),  # c0
        WriteClaim("c0", push_now=False),
        AfterClaim("c0"),
        SettleIntents("h1"),  # live
        WriteIntent("h1", "r2", (K,)),  # c1, from a stale look
        WriteClaim("c1", push_now=False),  # lost
        AfterClaim("c1"),
    )


def test_racing_intents_of_one_message_for_one_host() -> None:
    """Two replicas' intents of one message for one host: the second remembers the first's claim
    (``earlier_claims``), so the first landing keeps the message when the second is taken back."""
    run(
        WriteIntent("h1", "r1", (K,)),  # c0
        WriteIntent("h1", "r2", (K,)),  # c1 replaces c0's entry
        WriteClaim("c0", push_now=False),  # lands
        WriteClaim("c1", push_now=False),  # lost
        AfterClaim("c1"),  # takes back the only entry of a landed claim
    )


def test_an_acknowledgement_of_a_replaced_intent_whose_earlier_claim_landed_is_a_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host pushed a message at its claim acknowledges it while its record holds a second
    intent of it (a stale look at the cursor) that remembers the landed claim: that is the message
    delivered, and stays so once the acked list, trimmed, no longer names it."""
    monkeypatch.setattr(host_record, "ACKED_KEPT", 3)
    mail = MessageKey("email", "AAMk-1")
    fleet = run(
        WriteIntent("h2", "r1", (mail,)),  # c0
        WriteClaim("c0", push_now=True),  # lands; h2 is pushed the message
        AfterClaim("c0"),
        WriteIntent("h2", "r1", (mail,)),  # c1 replaces c0's intent, earlier_claims ("c0",)
        Acknowledge("h2", (mail,)),
        WriteClaim("c1", push_now=False),  # lost
        AfterClaim("c1"),
        WriteIntent("h2", "r1", BY_CHAT["19:a"][:3]),  # c2
        WriteClaim("c2", push_now=False),
        bounded_lists=True,
    )
    assert fleet.delivered[mail] == ["h2"]
    fleet.check_drains()  # h2 acknowledges c2's three: ``mail`` is trimmed from its acked list


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.sampled_from(sorted(MESSAGES)), max_size=4), st.sampled_from(HOSTS)),
        max_size=4,
    )
)
def test_an_entry_is_bound_to_one_host_once(passes: list[tuple[list[MessageKey], str]]) -> None:
    """``moving`` binds an entry once: a pass that reads it free after another bound it (two sweep
    passes overlapping as a lease changes hands) keeps the first binding, which may be written in."""
    record = with_intents(empty_record("h0"), "c", list(MESSAGES.values()), T0)
    record = settled_intents(record, {"c"}, ())
    first: dict[MessageKey, str] = {}
    for keys, to_host in passes:
        record = moving(record, keys, to_host)
        for k in keys:
            first.setdefault(k, to_host)
        assert {e.key: e.moving_to for e in record.pending if e.moving_to} == first


# --- the choice rules (service.delivery.choice) ---


@dataclass
class Target:
    """A live target: a push session takes any number; a bounded one has room for ``room`` more."""

    target_id: str
    kind: TargetKind
    chats: frozenset[str]
    room: int = 0

    def is_alive(self) -> bool:
        return True

    def accepts(self, message: InboundMessage) -> bool:
        return message.chat_id in self.chats

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        assert self.kind.bounded, "room is asked of bounded targets only"
        return len(alongside) < self.room

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        pass

    async def deliver(self, message: InboundMessage) -> Handover:
        raise AssertionError("the rules hand nothing over")


CHATS = ("19:a", "19:b", "email")


@st.composite
def targets(draw: st.DrawFn) -> list[Target]:
    count = draw(st.integers(0, 5))
    return [
        Target(
            f"t{i}",
            draw(st.sampled_from(TargetKind)),
            frozenset(draw(st.sets(st.sampled_from(CHATS), max_size=3))),
            draw(st.integers(0, 3)),
        )
        for i in range(count)
    ]


ids = st.one_of(
    st.integers(0, 2_000_000_000_000).map(str),  # Teams: creation milliseconds
    st.text("AaMk-_=", min_size=1, max_size=6),  # Graph mail ids
    st.sampled_from(["٣", "²", "1e3", " 7"]),  # digits that are not ASCII, or not only digits
)
messages = st.builds(
    _message,
    st.sampled_from(CHATS),
    ids,
    st.integers(0, 3),
)
message_lists = st.lists(messages, max_size=12, unique_by=lambda m: m.key)
RULES = settings(max_examples=300, deadline=None)


@RULES
@given(message_lists, targets())
def test_allot_gives_no_bounded_target_past_its_room_and_every_chosen_message_a_taker(
    batch: list[InboundMessage], live: list[Target]
) -> None:
    result = allot(batch, live)
    chosen = [m.key for m in result.chosen]
    assert len(chosen) == len(set(chosen)) and set(chosen) <= {m.key for m in batch}
    assert chosen == [m.key for m in sorted(result.chosen, key=delivery_order)]
    by_id = {t.target_id: t for t in live}
    for t in live:
        taken, left = result.taken[t.target_id], result.left[t.target_id]
        if not t.kind.bounded:
            assert taken == [] and left == []
            continue
        assert len(taken) <= t.room, f"{t.target_id} allotted {len(taken)} with room for {t.room}"
        assert all(t.accepts(m) and m.key in chosen for m in taken)
        if left:  # it had no room left for them
            assert len(taken) == t.room and all(t.accepts(m) for m in left)
    allotted = [m.key for ms in result.taken.values() for m in ms]
    assert len(allotted) == len(set(allotted)), "a message allotted to two targets"
    for m in batch:
        takers = [t for t in live if t.accepts(m)]
        pushed = any(not t.kind.bounded for t in takers)
        if m.key in chosen:
            assert takers, f"{m.key} chosen with no live target accepting it"
            assert pushed or m.key in allotted, f"{m.key} chosen for bounded targets, allotted none"
        else:
            assert not pushed, f"{m.key} left out though a push target takes it"
            assert all(m in result.left[t.target_id] for t in takers)
    assert set(by_id) == set(result.taken) == set(result.left)


@RULES
@given(
    messages,
    targets(),
    st.one_of(st.none(), st.sampled_from([f"t{i}" for i in range(6)])),
    st.one_of(st.none(), st.sampled_from([f"t{i}" for i in range(6)])),
    st.integers(0, 10),
)
def test_choose_takes_a_candidate_by_permission_then_sponsor_wait_then_sticky(
    message: InboundMessage,
    live: list[Target],
    allotted_to: str | None,
    sticky: str | None,
    turn: int,
) -> None:
    candidates = [t for t in live if t.accepts(message)]
    chosen = choose(
        message, candidates, allotted_to=allotted_to, sticky=sticky, turns=itertools.count(turn)
    )
    assert chosen is None or any(chosen is t for t in candidates)
    allotted = [t for t in candidates if t.target_id == allotted_to]
    if allotted:
        assert chosen is allotted[0]
        return
    roomy = [t for t in candidates if not t.kind.bounded or t.room > 0]
    assert (chosen is None) == (not roomy)
    if chosen is None:
        return
    assert chosen in roomy, "a bounded target with no room chosen"
    kinds = {t.kind for t in roomy}
    if TargetKind.PERMISSION in kinds:
        assert chosen.kind is TargetKind.PERMISSION
    elif TargetKind.SPONSOR_WAIT in kinds:
        assert chosen.kind is TargetKind.SPONSOR_WAIT
    elif any(t.target_id == sticky for t in roomy):
        assert chosen.target_id == sticky
    else:  # round-robin over what has room
        assert chosen is roomy[turn % len(roomy)]


def _reference_before(a: InboundMessage, b: InboundMessage) -> bool | None:
    """Created first; at the same time, a numeric (ASCII) id before any other, numeric ids by value,
    others by text. None: the two tie (the same time and id)."""
    if a.created != b.created:
        return a.created < b.created
    na, nb = (m.message_id.isascii() and m.message_id.isdigit() for m in (a, b))
    if na != nb:
        return na
    if na:
        ia, ib = int(a.message_id), int(b.message_id)
        return None if ia == ib else ia < ib
    return None if a.message_id == b.message_id else a.message_id < b.message_id


@RULES
@given(messages, messages, messages)
def test_delivery_order_is_a_total_order_by_created_then_numeric_id(
    a: InboundMessage, b: InboundMessage, c: InboundMessage
) -> None:
    ka, kb, kc = (delivery_order(m) for m in (a, b, c))
    before = _reference_before(a, b)
    assert (ka < kb) == (before is True) and (kb < ka) == (before is False)
    assert (ka == kb) == (before is None)
    if ka <= kb <= kc:
        assert ka <= kc
    # Within one chat ids are unique (Teams ids carry no leading zeros), so no two messages tie there.
    if a.chat_id == b.chat_id and a.message_id != b.message_id:
        assert ka != kb
