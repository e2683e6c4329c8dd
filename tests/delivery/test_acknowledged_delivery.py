"""Acknowledged delivery's parts on a LocalBackend: the host record, the hub's reservation, the claim's
intent written before the claim, the keeper's pushes and acknowledgements, and the sweep's moves."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from service.delivery.claim_intents import ClaimIntents
from service.delivery.claim_lookup import INTENT_LAPSE_S, ClaimFate, ClaimLookup
from service.delivery.host_keeper import HostKeeper
from service.delivery.host_record import (
    MAX_PENDING,
    EntryState,
    HeldBy,
    acknowledged,
    empty_record,
    held,
    moved_in,
    moved_out,
    parse_host_record,
    record_key,
    render_host_record,
    settled_intents,
    with_intents,
)
from service.delivery.host_records import HostRecords
from service.delivery.hub import DeliveryHub, DispatchOutcome, Handover, TargetKind
from service.domain.conversation import TEAMS_CHATS
from service.domain.message import InboundMessage, Source
from service.ledger.claims.chat_claim_types import ChatClaimOutcome, ClaimProblem
from service.ledger.claims.chat_cursor import CLAIM_MARKS_KEPT, Candidate
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.leases import Lease
from service.ledger.records.reads import CorruptValueError
from service.storage.errors import TransientStorageError
from service.storage.local import LocalBackend
from service.telemetry.metrics import DeliveryMetrics, LedgerMetrics, Metrics, RoleMetrics
from service.workers.delivery_sweep import DeliverySweep

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


def msg(
    mid: str, *, chat: str = "19:c1", minutes: float = 0, source: Source = Source.CHAT
) -> InboundMessage:
    return InboundMessage(
        source, chat, mid, "u1", "Ada", T0 + timedelta(minutes=minutes), f"body {mid}"
    )


class Offered:
    """A chat ledger offer carrying its inbound message, as the chat poll's OfferedMessage does."""

    def __init__(self, message: InboundMessage) -> None:
        self.inbound = message
        self.candidate = Candidate(message.message_id, message.created)


class HostTarget:
    """A push target of an acknowledging host: records what it was handed, tells the keeper as PushTarget does."""

    kind = TargetKind.PUSH

    def __init__(self, host_id: str, session: str = "s1", keeper: HostKeeper | None = None) -> None:
        self.host_id, self.session, self.keeper = host_id, session, keeper
        self.target_id = f"push:{session}"
        self.alive = True
        self.got: list[str] = []

    def is_alive(self) -> bool:
        return self.alive and (self.keeper is None or self.keeper.has_room(self.host_id))

    def is_reading(self) -> bool:
        return self.alive

    def accepts(self, message: InboundMessage) -> bool:
        return True

    def room_for(self, message: InboundMessage, alongside: object) -> bool:
        return True

    def allotted(self, taken: object, left: object) -> None:
        pass

    async def deliver(self, message: InboundMessage) -> Handover:
        if not self.alive:
            return Handover.NOT_TAKEN
        self.got.append(message.message_id)
        if self.keeper is not None:
            self.keeper.pushed(self.host_id, self.session, message)
        return Handover.TAKEN


class PlainTarget(HostTarget):
    """A push host that does not acknowledge (no host id)."""

    def __init__(self, session: str) -> None:
        super().__init__("", session)
        self.host_id = None  # type: ignore[assignment]


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.mono = 1000.0

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.mono += seconds


class OrderedBackend(LocalBackend):
    """A LocalBackend that notes the order of writes, and can fail the writes of one key prefix."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes: list[str] = []
        self.fail_prefix: str | None = None

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if self.fail_prefix is not None and key.startswith(self.fail_prefix):
            raise TransientStorageError("injected")
        self.writes.append(key)
        return await super().write_text(key, content, if_match=if_match, if_absent=if_absent)


# --- the record ---


def test_an_intent_becomes_live_when_its_claim_lands_and_leaves_when_acknowledged() -> None:
    record = with_intents(empty_record("h1"), "claim-1", [msg("1"), msg("2")], T0)
    assert [(e.key, e.state) for e in record.pending] == [
        (("19:c1", "1"), EntryState.INTENT),
        (("19:c1", "2"), EntryState.INTENT),
    ]
    record = settled_intents(record, landed={"claim-1"}, failed=())
    assert {e.state for e in record.pending} == {EntryState.LIVE}
    record = acknowledged(record, [("19:c1", "1")])
    assert [e.key for e in record.pending] == [("19:c1", "2")] and record.acked == (("19:c1", "1"),)
    # A repeat of an acknowledged message (a retried claim, a late intent) is not owed again.
    again = with_intents(record, "claim-2", [msg("1")], T0)
    assert [e.key for e in again.pending] == [("19:c1", "2")]
    assert parse_host_record(render_host_record(record)) == record


def test_a_retried_claim_replaces_the_intent_and_a_failed_one_goes() -> None:
    record = with_intents(empty_record("h1"), "claim-1", [msg("1")], T0)
    retried = with_intents(record, "claim-2", [msg("1")], T0, replacing="claim-1")
    assert [e.claims for e in retried.pending] == [("claim-2",)]
    assert settled_intents(retried, landed=(), failed={"claim-2"}).pending == ()


def test_another_claims_intent_of_the_same_message_is_remembered_until_it_fails_too() -> None:
    # Two replicas' claims of one message for one host (two looks at the cursor): either may land.
    record = with_intents(empty_record("h1"), "claim-1", [msg("1")], T0)
    record = with_intents(record, "claim-2", [msg("1")], T0)
    assert [e.claims for e in record.pending] == [("claim-2", "claim-1")]
    fell_back = settled_intents(record, landed=(), failed={"claim-2"})
    assert [e.claims for e in fell_back.pending] == [("claim-1",)]
    landed = settled_intents(record, landed={"claim-1"}, failed={"claim-2"})
    assert [(e.claim, e.state) for e in landed.pending] == [("claim-1", EntryState.LIVE)]
    assert settled_intents(fell_back, landed=(), failed={"claim-1"}).pending == ()


def test_a_corrupt_record_is_refused_with_the_field_named() -> None:
    with pytest.raises(CorruptValueError, match="pending"):
        parse_host_record('{"host_id": "h1", "pending": "nope"}')
    with pytest.raises(CorruptValueError):
        parse_host_record("not json")


def test_a_host_is_unseen_from_the_end_of_its_session_or_a_hold_nobody_renewed() -> None:
    stale = timedelta(minutes=7)
    live = held(empty_record("h"), HeldBy(replica="r1", session="s", at=T0))
    assert live.unseen_since(T0 + timedelta(minutes=5), stale) is None
    assert live.unseen_since(T0 + timedelta(minutes=8), stale) == T0  # its replica died serving it
    ended = held(empty_record("h"), HeldBy(replica="r1", session="s", at=T0, active=False))
    assert ended.unseen_since(T0 + timedelta(seconds=1), stale) == T0


def test_moved_messages_are_never_owed_twice() -> None:
    source = settled_intents(with_intents(empty_record("a"), "c", [msg("1")], T0), {"c"}, ())
    destination = moved_in(empty_record("b"), source.pending, "a", T0)
    assert [(e.key, e.moved_from, e.movable) for e in destination.pending] == [
        (("19:c1", "1"), "a", False)
    ]
    assert (
        moved_in(destination, source.pending, "a", T0) == destination
    )  # a repeated move adds nothing
    source = moved_out(source, [("19:c1", "1")])
    assert source.pending == () and with_intents(source, "late", [msg("1")], T0).pending == ()


# --- the hub ---


async def test_a_message_reserved_for_an_acknowledging_host_goes_to_that_host_or_waits_for_it() -> (
    None
):
    hub = DeliveryHub(metrics=DeliveryMetrics())
    owed, other = HostTarget("h1", "s1"), PlainTarget("s2")
    hub.register(owed)
    hub.register(other)
    plan = hub.reserve([msg("1"), msg("2", chat="19:c2"), msg("3", chat="19:c3")])
    reserved = {m.message_id for ms in plan.values() for m in ms}
    assert (
        set(plan) <= {"h1"} and reserved
    )  # round robin: some go to the plain host, without a record
    owed.alive = False  # the host's stream dropped between the claim and the push
    dispatches = await hub.dispatch([msg("1"), msg("2", chat="19:c2"), msg("3", chat="19:c3")])
    for d in dispatches:
        if d.message_id in reserved:
            assert d.outcome is DispatchOutcome.PENDING  # kept in its record, for its next session
        else:
            assert d.outcome is DispatchOutcome.DELIVERED and d.target_id == "push:s2"
    assert not set(other.got) & reserved, "a message owed to one host never reaches another"


async def test_an_owed_message_goes_to_the_hosts_new_session_on_the_same_replica() -> None:
    hub = DeliveryHub(DeliveryMetrics())
    first = HostTarget("h1", "s1")
    hub.register(first)
    hub.reserve([msg("1")])
    hub.unregister(first.target_id)
    second = HostTarget("h1", "s2")
    hub.register(second)
    (dispatch,) = await hub.dispatch([msg("1")])
    assert dispatch.outcome is DispatchOutcome.PUSHED and second.got == ["1"]


# --- the claim's intent ---


def _stack(
    tmp_path: Path,
) -> tuple[OrderedBackend, DeliveryHub, HostRecords, ClaimIntents, ChatLedger[Offered]]:
    backend = OrderedBackend(tmp_path)
    hub = DeliveryHub(DeliveryMetrics())
    records = HostRecords(backend, LedgerMetrics())
    return (
        backend,
        hub,
        records,
        ClaimIntents(hub, records),
        ChatLedger[Offered](backend, metrics=LedgerMetrics()),
    )


async def test_the_intent_is_in_the_hosts_record_before_the_claim_is_written(
    tmp_path: Path,
) -> None:
    backend, hub, records, intents, ledger = _stack(tmp_path)
    hub.register(HostTarget("h1"))
    offered = [Offered(msg("1")), Offered(msg("2"))]
    claim = await ledger.claim(
        "19:c1", offered, T0, intent=intents.for_messages(lambda o: o.inbound)
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED
    assert backend.writes.index(record_key("h1")) < backend.writes.index(
        TEAMS_CHATS.cursor_key("19:c1")
    )
    record = await records.read("h1")
    (token,) = {e.claim for e in record.pending}
    cursor = (await ledger.resolve("19:c1")).value
    assert cursor is not None and cursor.has_claim(token)
    assert await ClaimLookup(backend).fate(record.pending[0], T0) is ClaimFate.LANDED


async def test_a_record_that_does_not_take_the_intent_stops_the_claim(tmp_path: Path) -> None:
    backend, hub, _, intents, ledger = _stack(tmp_path)
    hub.register(HostTarget("h1"))
    backend.fail_prefix = "deliveries/"
    claim = await ledger.claim(
        "19:c1", [Offered(msg("1"))], T0, intent=intents.for_messages(lambda o: o.inbound)
    )
    assert (
        claim.outcome is ChatClaimOutcome.UNRESOLVED and claim.problem is ClaimProblem.INTENT_FAILED
    )
    assert not await backend.exists(
        TEAMS_CHATS.cursor_key("19:c1")
    )  # nothing claimed: the message stays in Graph
    backend.fail_prefix = None
    claim = await ledger.claim(
        "19:c1", [Offered(msg("1"))], T0, intent=intents.for_messages(lambda o: o.inbound)
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED  # claimed next cycle, as any unresolved claim


async def test_a_claim_lost_to_another_replica_takes_its_intent_back(tmp_path: Path) -> None:
    backend, hub, records, intents, ledger = _stack(tmp_path)
    hub.register(HostTarget("h1"))
    rival = ChatLedger[Offered](backend, metrics=LedgerMetrics())
    assert (await rival.claim("19:c1", [Offered(msg("1"))], T0)).outcome is ChatClaimOutcome.CLAIMED
    claim = await ledger.claim(
        "19:c1", [Offered(msg("1"))], T0, intent=intents.for_messages(lambda o: o.inbound)
    )
    assert claim.outcome is ChatClaimOutcome.LOST
    assert (
        await records.read("h1")
    ).pending == ()  # written beside the read, taken back once it showed the loss


class ReadAwaitsIntent(OrderedBackend):
    """Reads of the chat's cursor wait (bounded) until a delivery record's write has begun."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.record_write_began = asyncio.Event()

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if key.startswith("deliveries/"):
            self.record_write_began.set()
        return await super().write_text(key, content, if_match=if_match, if_absent=if_absent)

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        if key == TEAMS_CHATS.cursor_key("19:c1"):
            try:
                await asyncio.wait_for(self.record_write_began.wait(), timeout=5)
            except TimeoutError:
                raise TransientStorageError(
                    "the intent was not being written while the cursor was read"
                ) from None
        return await super().read_text_with_etag(key)


async def test_the_intent_is_written_while_the_claim_reads_the_cursor(tmp_path: Path) -> None:
    backend = ReadAwaitsIntent(tmp_path)
    hub, metrics = DeliveryHub(DeliveryMetrics()), Metrics()
    records = HostRecords(backend, LedgerMetrics())
    ledger = ChatLedger[Offered](backend, metrics=metrics.ledger)
    hub.register(HostTarget("h1"))
    claim = await ledger.claim(
        "19:c1",
        [Offered(msg("1")), Offered(msg("2"))],
        T0,
        intent=ClaimIntents(hub, records).for_messages(lambda o: o.inbound),
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED
    assert backend.writes == [
        record_key("h1"),
        TEAMS_CHATS.cursor_key("19:c1"),
    ]  # one intent write, then the claim
    record = await records.read("h1")
    assert [e.key[1] for e in record.pending] == ["1", "2"]
    assert await ClaimLookup(backend).fate(record.pending[0], T0) is ClaimFate.LANDED
    assert (
        metrics.registry.get_sample_value(
            "entrabot_claim_intent_seconds_count", {"path": "beside_read"}
        )
        == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "entrabot_claim_intent_seconds_count", {"path": "after_read"}
        )
        is None
    )


async def test_a_read_showing_part_claimed_elsewhere_rewrites_the_intent_for_what_is_won(
    tmp_path: Path,
) -> None:
    backend, hub, records, intents, ledger = _stack(tmp_path)
    hub.register(HostTarget("h1"))
    rival = ChatLedger[Offered](backend, metrics=LedgerMetrics())
    assert (await rival.claim("19:c1", [Offered(msg("1"))], T0)).outcome is ChatClaimOutcome.CLAIMED
    backend.writes.clear()
    claim = await ledger.claim(
        "19:c1",
        [Offered(msg("1")), Offered(msg("2"))],
        T0,
        intent=intents.for_messages(lambda o: o.inbound),
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED and [
        o.inbound.message_id for o in claim.won
    ] == ["2"]
    # ahead of the read for both, taken back, written for "2" alone, and only then the claim
    assert backend.writes == [record_key("h1")] * 3 + [TEAMS_CHATS.cursor_key("19:c1")]
    record = await records.read("h1")
    (entry,) = record.pending  # never an entry for "1", which another claim holds
    assert entry.key == ("19:c1", "2")
    assert await ClaimLookup(backend).fate(entry, T0) is ClaimFate.LANDED


async def test_an_intent_whose_claim_never_landed_lapses(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    record = with_intents(empty_record("h1"), "never-written", [msg("1")], T0)
    lookup = ClaimLookup(backend)
    assert await lookup.fate(record.pending[0], T0 + timedelta(seconds=5)) is ClaimFate.NOT_YET
    assert (
        await lookup.fate(record.pending[0], T0 + timedelta(seconds=INTENT_LAPSE_S + 1))
        is ClaimFate.NEVER
    )


# --- the keeper ---


def _keeper(backend: LocalBackend, hub: DeliveryHub, clock: Clock, **kw: Any) -> HostKeeper:
    return HostKeeper(
        HostRecords(backend, LedgerMetrics()),
        ClaimLookup(backend),
        hub,
        "r1",
        metrics=DeliveryMetrics(),
        clock=clock,
        monotonic=clock.monotonic,
        **kw,
    )


async def _owed(
    backend: LocalBackend, host: str, messages: list[InboundMessage], *, landed: bool
) -> None:
    """What a replica that died after its claim (landed) or before it (not) left in the host's record."""
    ledger = ChatLedger[Offered](backend, clock=lambda: T0, metrics=LedgerMetrics())
    token = "claim-x"
    if landed:
        await ledger.claim("19:c1", [Offered(m) for m in messages], T0, intent=None)
        cursor = (await ledger.resolve("19:c1")).value
        assert cursor is not None
        token = cursor.claims[0].token
    await HostRecords(backend, LedgerMetrics()).update(
        host, lambda r: with_intents(r, token, messages, T0)
    )


async def _host_connects(
    backend: LocalBackend, hub: DeliveryHub, clock: Clock, host: str
) -> tuple[HostKeeper, HostTarget]:
    """A keeper on a replica where ``host``'s push stream has just opened, past the intents' settling time."""
    clock.advance(10)
    keeper = _keeper(backend, hub, clock)
    target = HostTarget(host, "s1", keeper)
    hub.register(target)
    keeper.stream_opened(host, "s1")
    await keeper.sync(host)
    return keeper, target


async def test_a_host_connecting_anywhere_is_pushed_what_a_dead_replica_claimed_for_it(
    tmp_path: Path,
) -> None:
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "h1", [msg("1")], landed=True)
    await HostRecords(backend, LedgerMetrics()).update(
        "h2", lambda r: with_intents(r, "in-flight", [msg("9")], T0)
    )
    keeper, target = await _host_connects(backend, hub, clock, "h1")
    assert target.got == ["1"]
    record = await HostRecords(backend, LedgerMetrics()).read("h1")
    assert (
        record.held_by is not None
        and record.held_by.replica == "r1"
        and record.pending[0].state is EntryState.LIVE
    )
    await keeper.acknowledge("h1", [("19:c1", "1")])
    await keeper.sync("h1")
    await _drain(keeper)
    assert (await HostRecords(backend, LedgerMetrics()).read("h1")).pending == ()
    assert keeper.status()["acknowledged"] == 1


async def _drain(keeper: HostKeeper) -> None:
    await keeper.background.settle()  # the batched acknowledgement writes


async def test_an_intent_whose_claim_has_not_landed_is_not_pushed_and_lapses(
    tmp_path: Path,
) -> None:
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "h1", [msg("1")], landed=False)
    keeper, target = await _host_connects(backend, hub, clock, "h1")
    assert target.got == []  # the claim may still be in flight somewhere: never pushed on a guess
    clock.advance(INTENT_LAPSE_S)
    keeper.stream_opened("h1", "s1")  # a resume reads the record again
    await keeper.sync("h1")
    assert (
        target.got == [] and (await HostRecords(backend, LedgerMetrics()).read("h1")).pending == ()
    )


async def test_an_unacknowledged_push_is_redelivered_once_after_the_bound(tmp_path: Path) -> None:
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "h1", [msg("1")], landed=True)
    keeper = _keeper(backend, hub, clock, redeliver_after_s=15.0)
    target = HostTarget("h1", "s1", keeper)
    hub.register(target)
    keeper.stream_opened("h1", "s1")
    await keeper.sync("h1")
    for _ in range(20):
        clock.advance(5)
        await keeper.cycle()
    assert target.got == ["1", "1"] and keeper.status()["redeliveries"] == 1
    assert keeper.status()["pending_by_age"]["lt_300s"] == 1  # what the alert watches


async def test_a_host_owed_its_limit_takes_no_new_claims_but_is_still_pushed_what_it_is_owed(
    tmp_path: Path,
) -> None:
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "h1", [msg(str(n), minutes=n) for n in range(MAX_PENDING)], landed=True)
    keeper, target = await _host_connects(backend, hub, clock, "h1")
    assert not keeper.has_room("h1") and keeper.has_room("h2")
    assert not hub.can_take(Source.CHAT)  # nothing new is claimed for it
    assert len(target.got) == MAX_PENDING


# --- the sweep ---


def _sweep(backend: LocalBackend, clock: Clock, move_after_s: float = 600.0) -> DeliverySweep:
    lease = Lease(
        backend,
        "delivery_sweep",
        "r1",
        clock=clock,
        monotonic=clock.monotonic,
        metrics=RoleMetrics(),
    )
    return DeliverySweep(
        lease,
        HostRecords(backend, LedgerMetrics()),
        ClaimLookup(backend),
        move_after_s=move_after_s,
        clock=clock,
        monotonic=clock.monotonic,
        metrics=DeliveryMetrics(),
    )


async def _hold(backend: LocalBackend, host: str, at: datetime, *, active: bool = True) -> None:
    await HostRecords(backend, LedgerMetrics()).update(
        host, lambda r: held(r, HeldBy(replica="r2", session="s", at=at, active=active))
    )


async def test_what_a_host_that_went_away_is_owed_moves_once_to_a_live_host(tmp_path: Path) -> None:
    backend, clock = LocalBackend(tmp_path), Clock()
    await _owed(backend, "gone", [msg("1")], landed=True)
    await _hold(backend, "gone", T0, active=False)
    clock.advance(60)
    await _hold(backend, "live", clock.now)
    sweep = _sweep(backend, clock)
    assert await sweep.sweep() == 0  # not gone long enough
    clock.advance(600)
    await _hold(backend, "live", clock.now)
    assert await sweep.sweep() == 1
    records = HostRecords(backend, LedgerMetrics())
    gone, live = await records.read("gone"), await records.read("live")
    assert gone.pending == () and gone.moved == (("19:c1", "1"),)
    assert [(e.key, e.moved_from) for e in live.pending] == [(("19:c1", "1"), "gone")]
    # The live host goes away in turn: what was moved to it stays with it.
    await _hold(backend, "live", clock.now, active=False)
    await _hold(backend, "third", clock.now + timedelta(seconds=700))
    clock.advance(700)
    assert await sweep.sweep() == 0


async def test_a_held_host_keeps_what_it_is_owed(tmp_path: Path) -> None:
    backend, clock = LocalBackend(tmp_path), Clock()
    await _owed(backend, "busy", [msg("1")], landed=True)
    clock.advance(3600)
    await _hold(backend, "busy", clock.now)
    await _hold(backend, "other", clock.now)
    assert await _sweep(backend, clock).sweep() == 0


async def test_an_interrupted_move_finishes_to_the_host_it_chose(tmp_path: Path) -> None:
    backend, clock = OrderedBackend(tmp_path), Clock()
    await _owed(backend, "gone", [msg("1")], landed=True)
    await _hold(backend, "gone", T0, active=False)
    clock.advance(700)
    await _hold(backend, "first", clock.now)
    backend.fail_prefix = record_key("first")
    assert await _sweep(backend, clock).sweep() == 0  # chose "first", could not write to it
    backend.fail_prefix = None
    await _hold(backend, "second", clock.now + timedelta(seconds=1))  # now the most recently seen
    assert await _sweep(backend, clock).sweep() == 1
    assert (await HostRecords(backend, LedgerMetrics()).read("second")).pending == ()
    assert [e.key for e in (await HostRecords(backend, LedgerMetrics()).read("first")).pending] == [
        ("19:c1", "1")
    ]


async def test_an_interrupted_move_finishes_after_its_host_came_back(tmp_path: Path) -> None:
    # The host is never pushed what is bound to another (push_due), so the move must finish even
    # though the host is served again; left to a pass that waits for it to go away, it stays owed.
    backend, clock = OrderedBackend(tmp_path), Clock()
    await _owed(backend, "back", [msg("1")], landed=True)
    await _hold(backend, "back", T0, active=False)
    clock.advance(700)
    await _hold(backend, "first", clock.now)
    backend.fail_prefix = record_key("first")
    assert await _sweep(backend, clock).sweep() == 0  # bound to "first", not written there
    backend.fail_prefix = None
    await _hold(backend, "back", clock.now)  # its stream opens again
    assert await _sweep(backend, clock).sweep() == 1
    records = HostRecords(backend, LedgerMetrics())
    back, first = await records.read("back"), await records.read("first")
    assert back.pending == () and back.moved == (("19:c1", "1"),)
    assert [(e.key, e.moved_from) for e in first.pending] == [(("19:c1", "1"), "back")]


async def test_a_host_whose_push_stream_went_away_is_no_longer_held_and_what_it_is_owed_moves(
    tmp_path: Path,
) -> None:
    # A host whose network went away (a laptop closed) never ends its session: the replica keeps the
    # session until its idle timeout, but what serves the host is the push stream, and that is gone.
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "gone", [msg("1")], landed=True)
    keeper, target = await _host_connects(backend, hub, clock, "gone")
    assert target.got == ["1"]  # pushed into a stream its host never read from
    target.alive = False
    hub.unregister(target.target_id)  # the push stream closed; the session stays
    await keeper.cycle()
    holder = (await HostRecords(backend, LedgerMetrics()).read("gone")).held_by
    assert holder is not None and not holder.active
    for _ in range(20):
        clock.advance(60)
        await _hold(backend, "live", clock.now)
        await keeper.cycle()
    assert await _sweep(backend, clock).sweep() == 1
    assert [e.key for e in (await HostRecords(backend, LedgerMetrics()).read("live")).pending] == [
        ("19:c1", "1")
    ]
    # Its stream opens again on the same session: held again.
    target.alive = True
    hub.register(target)
    keeper.stream_opened("gone", "s1")
    await keeper.sync("gone")
    holder = (await HostRecords(backend, LedgerMetrics()).read("gone")).held_by
    assert holder is not None and holder.active and target.got == ["1"]


# --- a sponsor wait of an acknowledging host that could not answer ---


async def test_what_a_hosts_sponsor_wait_could_not_answer_is_owed_to_that_host_on_any_replica(
    tmp_path: Path,
) -> None:
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    assert await _keeper(backend, DeliveryHub(DeliveryMetrics()), clock).owe(
        "h1", [msg("1")]
    )  # the wait's replica
    keeper = _keeper(backend, hub, clock)  # the replica the host comes back to
    target = HostTarget("h1", "s2", keeper)
    hub.register(target)
    keeper.stream_opened("h1", "s2")
    await keeper.sync("h1")
    assert target.got == ["1"]
    await keeper.acknowledge("h1", [("19:c1", "1")])
    await _drain(keeper)
    assert await keeper.owe(
        "h1", [msg("1")]
    )  # owed again by mistake: it has it, so nothing is added
    assert (await HostRecords(backend, LedgerMetrics()).read("h1")).pending == ()


async def test_a_wait_message_certainly_not_written_to_its_hosts_record_is_not_owed(
    tmp_path: Path,
) -> None:
    backend, clock = OrderedBackend(tmp_path), Clock()
    backend.fail_prefix = "deliveries/"
    assert not await _keeper(backend, DeliveryHub(DeliveryMetrics()), clock).owe(
        "h1", [msg("1")]
    )  # the wait hands it back instead


async def test_the_sweep_settles_an_old_intent_of_any_host_before_a_busy_chat_could_push_its_claim_out(
    tmp_path: Path,
) -> None:
    """A replica died between a host's intent and its push while the host was away: the sweep settles the
    intent within a pass, so 32 newer claims in that chat later leave it owed, not ambiguous."""
    backend, clock, hub = LocalBackend(tmp_path), Clock(), DeliveryHub(DeliveryMetrics())
    await _owed(backend, "away", [msg("1")], landed=True)
    await _hold(backend, "away", T0, active=False)  # away, but not long enough for a move
    clock.advance(90)
    assert await _sweep(backend, clock).sweep() == 0
    assert [
        e.state for e in (await HostRecords(backend, LedgerMetrics()).read("away")).pending
    ] == [EntryState.LIVE]
    busy = ChatLedger[Offered](backend, clock=clock, metrics=LedgerMetrics())
    for n in range(
        2, 2 + CLAIM_MARKS_KEPT
    ):  # the cursor keeps no trace of the first claim any more
        assert (
            await busy.claim("19:c1", [Offered(msg(str(n), minutes=n))], T0)
        ).outcome is ChatClaimOutcome.CLAIMED
    _, target = await _host_connects(backend, hub, clock, "away")
    assert target.got == ["1"]
