"""Records the single-host system wrote read back through the fleet's ledgers, beside the fleet's own.

The lines below are in the single-host shape (field names, spellings and timestamp format of its
``tools/interaction_log.py`` and ``tools/promises.py``, quoted in service/ledger/memory/single_host_records.py),
written to the store as that system wrote them: ``json.dumps(entry)`` per line.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from service.ledger.memory.interactions import (
    Action,
    Channel,
    Direction,
    Interaction,
    InteractionLog,
    InteractionQuery,
    interaction_key,
)
from service.ledger.memory.promises import (
    PROMISES_KEY,
    PromiseLedger,
    PromiseStatus,
    PromiseWriteOutcome,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import T0, FakeClock

DM = "19:ada_agent@unq.gbl.spaces"
GROUP = "19:launch@thread.v2"


def single_host_line(entry: dict[str, Any]) -> str:
    return json.dumps(entry) + "\n"


def at(minutes: int) -> str:
    """Its timestamps: ``datetime.now(UTC).isoformat()``, microseconds and ``+00:00``."""
    return (T0 + timedelta(minutes=minutes, microseconds=123456)).isoformat()


def single_host_interactions() -> list[dict[str, Any]]:
    return [
        {
            "id": "0b6f",
            "ts": at(1),
            "channel": "teams_dm",
            "direction": "inbound",
            "sender": "Ada Lovelace",
            "summary": "can you ship the report?",
            "recipient": "entrabot-agent",
            "action": "push_channel_notification",
            "content_ref": "1714000000001",
            "metadata": {"chat_id": DM, "ts": at(1)},
        },
        {
            "id": "1c70",
            "ts": at(2),
            "channel": "teams_group",
            "direction": "outbound",
            "sender": "entrabot-agent",
            "summary": "on it",
            "recipient": GROUP,
            "action": "send_teams_message",
            "content_ref": "1714000000002",
            "metadata": {"content_type": "text", "had_mentions": False},
        },
        {
            "id": "2d81",
            "ts": at(3),
            "channel": "email",
            "direction": "inbound",
            "sender": "bo@fabrikam.com",
            "summary": "Invoice — please pay",
            "recipient": "entrabot-agent",
            "action": "email_received",
            "content_ref": "AAMkAGI2",
            "metadata": {"subject": "Invoice", "encrypted": False},
        },
        {
            "id": "3e92",
            "ts": at(4),
            "channel": "terminal",
            "direction": "outbound",
            "sender": "entrabot-agent",
            "summary": "resolve_promise: 9f not found",
            "recipient": "self",
            "action": "promise.resolve",
            "content_ref": "9f",
            "metadata": {"promise_id": "9f", "outcome": "not_found"},
        },
        # action and content_ref are optional there
        {
            "id": "4fa3",
            "ts": at(5),
            "channel": "teams_unknown",
            "direction": "inbound",
            "sender": "Grace",
            "summary": "hello",
        },
    ]


async def write_single_host_day(store: MemoryBackend) -> None:
    """Its log appended one line per interaction, as ours does."""
    for entry in single_host_interactions():
        await store.append_text(interaction_key(T0.date()), single_host_line(entry))


async def test_single_host_interaction_lines_read_back_beside_the_fleets_own(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await write_single_host_day(store)
    log = InteractionLog(store, clock=clock)
    assert await log.record(
        Interaction(
            ts=T0 + timedelta(minutes=6),
            direction=Direction.IN,
            channel=Channel.CHAT,
            action=Action.DELIVERED.value,
            chat_id=DM,
            message_id="fleet-1",
        )
    )
    clock.advance(hours=1)

    read = await log.read()

    assert read.skipped_lines == 0
    rows = [
        (r.direction, r.channel, r.action, r.chat_id, r.message_id, r.sender) for r in read.records
    ]
    assert rows == [
        (
            Direction.IN,
            Channel.CHAT,
            "push_channel_notification",
            DM,
            "1714000000001",
            "Ada Lovelace",
        ),
        (
            Direction.OUT,
            Channel.CHAT,
            "send_teams_message",
            GROUP,
            "1714000000002",
            "entrabot-agent",
        ),
        (Direction.IN, Channel.EMAIL, "email_received", None, "AAMkAGI2", "bo@fabrikam.com"),
        (Direction.OUT, Channel.TERMINAL, "promise.resolve", None, "9f", "entrabot-agent"),
        (Direction.IN, Channel.CHAT, Action.RECEIVED.value, None, None, "Grace"),
        (Direction.IN, Channel.CHAT, Action.DELIVERED.value, DM, "fleet-1", None),
    ]
    assert read.records[0].ts == T0 + timedelta(minutes=1, microseconds=123456)
    assert read.records[0].summary == "can you ship the report?"
    assert dict(read.records[0].extra)["metadata"] == json.dumps(
        {"chat_id": DM, "ts": at(1)}, sort_keys=True
    )


async def test_single_host_interactions_answer_the_fleets_filters(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await write_single_host_day(store)
    log = InteractionLog(store, clock=clock)
    clock.advance(hours=1)

    outbound = await log.read(InteractionQuery(direction=Direction.OUT))
    in_the_dm = await log.read(InteractionQuery(chat_id=DM))

    assert [r.message_id for r in outbound.records] == ["1714000000002", "9f"]
    assert [r.message_id for r in in_the_dm.records] == ["1714000000001"]


def single_host_promise(pid: str, **changes: Any) -> dict[str, Any]:
    """Its ``Promise.to_entry()``: None values dropped."""
    return {
        "id": pid,
        "created_at": at(0),
        "chat_id": DM,
        "description": f"send the deck ({pid})",
        "status": "open",
        **changes,
    }


async def test_a_single_host_promise_reads_back_with_its_description_as_the_text(
    store: MemoryBackend,
) -> None:
    lines = [
        single_host_promise("a1", due_by="2026-12-01T17:00:00+00:00"),
        single_host_promise("b2", due_by="2026-12-02"),  # it never checked the deadline's form
        single_host_promise("c3", chat_id="terminal", due_by="by Friday"),
        single_host_promise(
            "b2", due_by="2026-12-02", status="resolved", resolved_at=at(30), resolution="sent"
        ),
    ]
    await store.write_text(PROMISES_KEY, "".join(single_host_line(p) for p in lines))

    listed = await PromiseLedger(store, metrics=LedgerMetrics()).list()

    assert listed.skipped_lines == 0
    promises = {p.id: p for p in listed.promises}
    assert {pid: p.text for pid, p in promises.items()} == {
        "a1": "send the deck (a1)",
        "b2": "send the deck (b2)",
        "c3": "send the deck (c3)",
    }
    assert promises["a1"].due_at == datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)
    assert promises["b2"].due_at == datetime(2026, 12, 2, tzinfo=timezone.utc)
    assert promises["c3"].due_at is None and promises["c3"].chat_id == "terminal"
    assert promises["b2"].status is PromiseStatus.RESOLVED and promises["b2"].resolution == "sent"
    assert promises["a1"].created_at == T0 + timedelta(microseconds=123456)


async def test_a_single_host_promise_the_fleet_rewrites_keeps_what_the_single_host_system_reads(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await store.write_text(
        PROMISES_KEY, single_host_line(single_host_promise("a1", due_by="by Friday"))
    )
    ledger = PromiseLedger(store, clock=clock, metrics=LedgerMetrics())

    assert (await ledger.resolve("a1", resolution="done")).outcome is PromiseWriteOutcome.WRITTEN

    [line] = (await store.read_text(PROMISES_KEY) or "").splitlines()
    stored = json.loads(line)
    # What its reader takes (id, created_at, chat_id, description, due_by, status, resolved_at, resolution).
    assert stored["description"] == "send the deck (a1)" and stored["due_by"] == "by Friday"
    assert (
        stored["status"] == "resolved"
        and stored["resolution"] == "done"
        and stored["chat_id"] == DM
    )
    [again] = (await ledger.list()).promises
    assert again.text == "send the deck (a1)" and again.status is PromiseStatus.RESOLVED
