"""The inbox of hosts without pushes on a LocalBackend: two replicas' hubs, records and ledgers over one
container, claims written with their intents, and the calls a host makes in a loop (SPEC §11)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from service.delivery.claim_intents import ClaimIntents
from service.delivery.claim_lookup import ClaimLookup
from service.delivery.host_record import EntryState, HeldBy, held
from service.delivery.host_records import HostRecords
from service.delivery.hub import DeliveryHub
from service.delivery.inbox import Inbox, InboxTiming, Received
from service.delivery.inbox_rules import CursorError, parse_cursor, render_cursor
from service.domain.message import InboundMessage, Source
from service.ledger.claims.chat_claim_types import ChatClaimOutcome
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.leases import Lease
from service.storage.local import LocalBackend
from service.telemetry.metrics import DeliveryMetrics, LedgerMetrics, RoleMetrics
from service.workers.delivery_sweep import DeliverySweep
from tests.delivery.test_acknowledged_delivery import T0, Clock, Offered, msg


@dataclass
class Replica:
    hub: DeliveryHub
    records: HostRecords
    intents: ClaimIntents
    ledger: ChatLedger[Offered]
    inbox: Inbox

    async def claim(self, chat: str, messages: list[InboundMessage], now: datetime) -> None:
        claim = await self.ledger.claim(
            chat,
            [Offered(m) for m in messages],
            now,
            intent=self.intents.for_messages(lambda o: o.inbound),
        )
        assert claim.outcome is ChatClaimOutcome.CLAIMED
        await self.hub.dispatch(messages)


def replica(backend: LocalBackend, name: str, clock: Clock) -> Replica:
    hub = DeliveryHub(metrics=DeliveryMetrics())
    records = HostRecords(backend, metrics=LedgerMetrics())
    intents = ClaimIntents(hub, records, clock=clock)
    inbox = Inbox(
        records,
        ClaimLookup(backend),
        hub,
        name,
        metrics=DeliveryMetrics(),
        in_flight=intents.in_flight,
        clock=clock,
        monotonic=clock.monotonic,
        timing=InboxTiming(poll_s=0.05),
    )
    return Replica(
        hub, records, intents, ChatLedger[Offered](backend, metrics=LedgerMetrics()), inbox
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fleet(tmp_path: Path, clock: Clock) -> tuple[Replica, Replica]:
    backend = LocalBackend(tmp_path)
    return replica(backend, "r1", clock), replica(backend, "r2", clock)


def ids(received: Received) -> list[str]:
    return [e.message.message_id for e in received.entries]


async def test_a_message_claimed_during_a_call_wakes_it_and_the_next_cursor_acknowledges_it(
    fleet: tuple[Replica, Replica],
) -> None:
    r1, _ = fleet
    first = await r1.inbox.receive("codex", None, 0)
    assert first.entries == [] and r1.hub.can_take(Source.EMAIL)  # a target from its first call

    waiting = asyncio.create_task(r1.inbox.receive("codex", first.cursor, 30))
    await asyncio.sleep(0.01)
    await r1.claim("19:c1", [msg("1")], T0)
    got = await asyncio.wait_for(waiting, 5)
    assert ids(got) == ["1"] and got.gap == 0
    # Claimed here, so the call took it before any cursor read settled its intent.
    assert (await r1.records.read("codex")).pending[0].state is EntryState.INTENT

    after = await r1.inbox.receive("codex", got.cursor, 0)
    assert after.entries == []
    record = await r1.records.read("codex")
    assert record.pending == () and record.acked == (("19:c1", "1"),)


async def test_what_a_cancelled_call_held_comes_back_once_through_another_replica(
    fleet: tuple[Replica, Replica], clock: Clock
) -> None:
    r1, r2 = fleet
    start = await r1.inbox.receive("codex", None, 0)
    call = asyncio.create_task(r1.inbox.receive("codex", start.cursor, 30))
    await asyncio.sleep(0.01)
    call.cancel()  # the host timed the call out while it waited
    with pytest.raises(asyncio.CancelledError):
        await call
    await r1.claim("19:c1", [msg("1"), msg("2")], T0)
    lost = await r1.inbox.receive("codex", start.cursor, 30)
    assert ids(lost) == ["1", "2"]  # a result the host dropped: its cursor never reaches a call

    clock.advance(5)  # past the young-intent bound: another replica settles it from the cursor
    again = await r2.inbox.receive("codex", start.cursor, 0)
    assert ids(again) == ["1", "2"]
    done = await r2.inbox.receive("codex", again.cursor, 0)
    assert done.entries == []
    # A stale cursor repeated later acknowledges nothing new and brings nothing back.
    assert (await r1.inbox.receive("codex", again.cursor, 0)).entries == []


async def test_a_cursor_acknowledges_only_its_own_hosts_entries(
    fleet: tuple[Replica, Replica], clock: Clock
) -> None:
    r1, _ = fleet
    await r1.inbox.receive("alice", None, 0)
    await r1.inbox.receive("bob", None, 0)
    r1.hub.unregister("inbox:bob")  # every claim below is alice's
    await r1.claim("19:c1", [msg("1")], T0)
    alice = await r1.inbox.receive("alice", None, 0)
    assert ids(alice) == ["1"]
    with pytest.raises(CursorError, match="another host"):
        await r1.inbox.receive("bob", alice.cursor, 0)
    with pytest.raises(CursorError, match="not one receive_messages returned"):
        await r1.inbox.receive("alice", "ship it", 0)
    assert ids(await r1.inbox.receive("alice", None, 0)) == ["1"]  # still owed to alice


def test_cursors_name_exactly_the_entries_returned() -> None:
    from service.delivery.host_record import empty_record

    record = empty_record("h").model_copy(update={"tag": "a1b2c3", "next_seq": 20})
    cursor = render_cursor("a1b2c3", [3, 4, 5, 9, 12, 13])
    assert cursor == "a1b2c3.3-5,9,12-13"
    assert parse_cursor(cursor, record) == {3, 4, 5, 9, 12, 13}
    assert parse_cursor("a1b2c3.", record) == frozenset()
    with pytest.raises(CursorError, match="never given"):
        parse_cursor("a1b2c3.19-25", record)


async def test_while_a_host_calls_one_replica_the_others_leave_its_messages_to_it(
    fleet: tuple[Replica, Replica], clock: Clock
) -> None:
    r1, r2 = fleet
    await r1.inbox.receive("codex", None, 0)
    await r2.inbox.cycle()  # the scan finds the inbox host: r2 knows it, held by r1 just now
    assert r2.inbox.knows("codex") and not r2.inbox.takes_for("codex")
    assert not r2.hub.can_take(Source.EMAIL)
    clock.advance(200)  # no call renewed r1's hold for longer than a call can take
    assert r2.inbox.takes_for("codex")
    clock.advance(3600)  # past the retention window: nobody's target
    r2.inbox._next_scan = float("-inf")
    await r2.inbox.cycle()
    assert not r2.inbox.knows("codex") and not r2.hub.can_take(Source.EMAIL)


async def test_an_inbox_host_away_past_its_window_has_its_messages_moved_and_hears_of_the_gap(
    tmp_path: Path, clock: Clock
) -> None:
    backend = LocalBackend(tmp_path)
    r1 = replica(backend, "r1", clock)
    await r1.inbox.receive("codex", None, 0)
    await r1.claim("19:c1", [msg("1")], T0)
    # Another host is live (a bridge holding its record) when the sweep finds codex gone.
    await r1.records.update("laptop", lambda r: held(r, HeldBy(replica="r2", session="s", at=T0)))
    clock.advance(3600 + 700)
    await r1.records.update(
        "laptop", lambda r: held(r, HeldBy(replica="r2", session="s", at=clock.now))
    )
    lease = Lease(
        backend,
        "delivery_sweep",
        "r1",
        ttl=timedelta(minutes=5),
        clock=clock,
        metrics=RoleMetrics(),
    )
    sweep = DeliverySweep(
        lease, r1.records, ClaimLookup(backend), clock=clock, metrics=DeliveryMetrics()
    )
    assert await sweep.sweep() == 1
    back = await r1.inbox.receive("codex", None, 0)
    assert back.entries == [] and back.gap == 1
    assert (await r1.inbox.receive("codex", back.cursor, 0)).gap == 0  # told once


async def test_a_message_handed_back_by_a_sponsor_wait_is_owed_to_the_inbox(
    fleet: tuple[Replica, Replica],
) -> None:
    r1, _ = fleet
    await r1.inbox.receive("codex", None, 0)
    r1.hub.hand_back([msg("7")])
    await asyncio.sleep(0.05)
    got = await r1.inbox.receive("codex", None, 0)
    assert ids(got) == ["7"]


async def test_a_newer_call_of_the_host_ends_an_older_one_still_waiting(
    fleet: tuple[Replica, Replica],
) -> None:
    r1, _ = fleet
    start = await r1.inbox.receive("codex", None, 0)
    # The host's connection went and the SDK left the handler running: the host calls again.
    old = asyncio.create_task(r1.inbox.receive("codex", start.cursor, 30))
    await asyncio.sleep(0.01)
    new = asyncio.create_task(r1.inbox.receive("codex", start.cursor, 30))
    assert (await asyncio.wait_for(old, 5)).entries == []
    await r1.claim("19:c1", [msg("1")], T0)
    assert ids(await asyncio.wait_for(new, 5)) == ["1"]
