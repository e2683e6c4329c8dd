"""The fleet's record of the agent's sent messages (delegated mode), on both backends: a send begins as a
pending entry and settles into an id, every replica reads it, it stays bounded, and a store that fails
makes a send refuse rather than post a message nobody could place."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from service.ledger.memory.sent_messages import (
    PENDING_TTL,
    SENT_KEPT,
    SentMessages,
    SentRecordUnavailable,
    parse_sent,
    sent_key,
)
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import FakeClock

CHAT = "19:abc@thread.v2"


async def stored(backend: MemoryBackend, chat: str = CHAT) -> tuple[frozenset[str], int]:
    record = parse_sent(await backend.read_text(sent_key(chat)) or "{}")
    return record.ids, len(record.pending)


async def test_a_send_is_pending_while_in_flight_and_an_id_once_settled(
    store: MemoryBackend, clock: FakeClock
) -> None:
    sender = SentMessages(store, "replica-1", clock=clock, metrics=LedgerMetrics())
    reader = SentMessages(store, "replica-2", clock=clock, metrics=LedgerMetrics())
    send = await sender.begin(CHAT)
    assert await stored(store) == (frozenset(), 1)
    during = await reader.view(CHAT, ["m1"])
    assert during.readable and during.in_flight_since == (clock.now,) and not during.ids
    assert await sender.settle(CHAT, send, "m1")
    assert await stored(store) == (frozenset({"m1"}), 0)
    after = await reader.view(CHAT, ["m1"])
    assert after.ids == {"m1"} and after.in_flight_since == ()
    assert reader.known(CHAT, "m1")  # learnt from the record: the next view needs no read


async def test_a_send_that_posted_nothing_leaves_no_id_and_no_pending_entry(
    store: MemoryBackend, clock: FakeClock
) -> None:
    sender = SentMessages(store, "replica-1", clock=clock, metrics=LedgerMetrics())
    send = await sender.begin(CHAT)
    assert await sender.settle(CHAT, send, None)
    assert await stored(store) == (frozenset(), 0)


async def test_the_sending_replica_holds_its_own_send_in_flight_without_reading(
    local_store: MemoryBackend, clock: FakeClock
) -> None:
    faulty = FaultyBackend(local_store)
    sender = SentMessages(faulty, "replica-1", clock=clock, metrics=LedgerMetrics())
    await sender.begin(CHAT)
    faulty.add(FaultRule(Fault.READ_FAILS))
    sender.remember(CHAT, "older")
    view = await sender.view(
        CHAT, ["older"]
    )  # every id known here: no read, and its own send in flight
    assert view.readable and view.in_flight_since == (clock.now,)


async def test_a_pending_entry_a_dead_replica_left_expires(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await SentMessages(store, "replica-dead", clock=clock, metrics=LedgerMetrics()).begin(CHAT)
    reader = SentMessages(store, "replica-2", clock=clock, metrics=LedgerMetrics())
    assert (await reader.view(CHAT, ["m"])).in_flight_since
    clock.advance(seconds=PENDING_TTL.total_seconds())
    assert (await reader.view(CHAT, ["m"])).in_flight_since == ()
    other = SentMessages(store, "replica-3", clock=clock, metrics=LedgerMetrics())
    await other.settle(CHAT, await other.begin(CHAT), "m2")
    assert await stored(store) == (frozenset({"m2"}), 0)  # the expired entry went with that write


async def test_concurrent_sends_from_several_replicas_are_all_recorded(
    store: MemoryBackend, clock: FakeClock
) -> None:
    replicas = [
        SentMessages(store, f"replica-{i}", clock=clock, metrics=LedgerMetrics()) for i in range(4)
    ]

    async def send(i: int, replica: SentMessages) -> None:
        pending = await replica.begin(CHAT)
        await replica.settle(CHAT, pending, f"m{i}")

    await asyncio.gather(*(send(i, r) for i, r in enumerate(replicas)))
    assert await stored(store) == (frozenset(f"m{i}" for i in range(4)), 0)


async def test_the_record_keeps_the_newest_ids_only(
    local_store: MemoryBackend, clock: FakeClock
) -> None:
    sender = SentMessages(local_store, "replica-1", clock=clock, metrics=LedgerMetrics())
    for n in range(SENT_KEPT + 5):
        clock.advance(seconds=1)
        await sender.settle(CHAT, await sender.begin(CHAT), f"m{n}")
    ids, _ = await stored(local_store)
    assert len(ids) == SENT_KEPT and "m0" not in ids and f"m{SENT_KEPT + 4}" in ids


async def test_a_send_is_refused_when_its_pending_entry_cannot_be_written(
    local_store: MemoryBackend, clock: FakeClock
) -> None:
    faulty = FaultyBackend(local_store)
    faulty.add(FaultRule(Fault.WRITE_FAILS))
    sender = SentMessages(faulty, "replica-1", clock=clock, metrics=LedgerMetrics())
    with pytest.raises(SentRecordUnavailable):
        await sender.begin(CHAT)
    faulty.heal()
    assert (
        await sender.view(CHAT, ["m"])
    ).in_flight_since == ()  # its own memory dropped the send too


async def test_a_lost_settle_answer_is_settled_by_reading_back(
    local_store: MemoryBackend, clock: FakeClock
) -> None:
    faulty = FaultyBackend(local_store)
    sender = SentMessages(faulty, "replica-1", clock=clock, metrics=LedgerMetrics())
    send = await sender.begin(CHAT)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    assert await sender.settle(CHAT, send, "m1")
    assert await stored(local_store) == (frozenset({"m1"}), 0)


async def test_an_unreadable_record_says_so_and_the_senders_memory_still_knows(
    local_store: MemoryBackend, clock: FakeClock
) -> None:
    faulty = FaultyBackend(local_store)
    sender = SentMessages(faulty, "replica-1", clock=clock, metrics=LedgerMetrics())
    send = await sender.begin(CHAT)
    faulty.add(FaultRule(Fault.WRITE_FAILS))
    assert not await sender.settle(CHAT, send, "m1")  # the fleet's record keeps the pending entry
    assert sender.known(CHAT, "m1")
    faulty.add(FaultRule(Fault.READ_CORRUPT))
    reader = SentMessages(faulty, "replica-2", clock=clock, metrics=LedgerMetrics())
    assert not (await reader.view(CHAT, ["m1"])).readable


async def test_records_are_per_chat(store: MemoryBackend, clock: FakeClock) -> None:
    sender = SentMessages(store, "replica-1", clock=clock, metrics=LedgerMetrics())
    await sender.settle("19:one@thread.v2", await sender.begin("19:one@thread.v2"), "m1")
    reader = SentMessages(store, "replica-2", clock=clock, metrics=LedgerMetrics())
    assert (await reader.view("19:two@thread.v2", ["m1"])).ids == frozenset()
    assert sent_key("19:one@thread.v2") == "sent_messages/19%3Aone%40thread.v2.json"
    assert timedelta(minutes=1) < PENDING_TTL
