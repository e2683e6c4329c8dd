"""A sponsor wait whose host goes away while it holds claimed messages hands them back: the next wait gets
them, once (issue 22 item 3). Without that, the sponsor's claimed messages reached nobody. The host goes
away by cancelling the call, or by its connection closing (``CallerLine``; through the real server:
test_sponsor_wait_caller_gone.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from service.delivery.hub import DeliveryHub, DeliveryTarget, TargetKind
from service.domain.message import InboundMessage, Source
from service.domain.sponsors import Sponsor, SponsorGate
from service.mcp.caller_line import CallerLine
from service.mcp.tool_registry import ToolCall
from service.telemetry.metrics import DeliveryMetrics
from service.tools.sponsor_wait import SponsorWaiter, WaitOutcome, WaitResult
from tests.mcp.server_fixture import WAIT_BOUND_S, eventually

SPONSOR = "sponsor-1"


def backlog_message(mid: str, minutes_ago: int) -> InboundMessage:
    """A sponsor's message written before the waits began (backlog: a wait takes several of these)."""
    return InboundMessage(
        Source.CHAT,
        "19:c1",
        mid,
        SPONSOR,
        "Grace",
        datetime.now(timezone.utc) - timedelta(minutes=minutes_ago),
        "yes, ship it",
        sender_is_sponsor=True,
    )


def waits(hub: DeliveryHub) -> list[DeliveryTarget]:
    return [t for t in hub.live_targets() if t.kind is TargetKind.SPONSOR_WAIT]


async def test_messages_held_by_a_wait_whose_host_left_go_to_the_next_wait_once() -> None:
    hub = DeliveryHub(DeliveryMetrics())
    waiter = SponsorWaiter(
        SponsorGate([Sponsor(object_id=SPONSOR)], tenant_id=None), max_timeout_s=30.0
    )
    first = asyncio.create_task(waiter.wait(ToolCall(session=None, hub=hub, request_id=1), 30.0))
    await eventually(lambda: waits(hub), "the first wait in the hub")
    older, newer = backlog_message("m-1", 20), backlog_message("m-2", 10)
    # Both are claimed for the wait; the first is handed over, and the wait waits for the second.
    assert [m.message_id for m in hub.claimable([older, newer])] == ["m-1", "m-2"]
    await hub.dispatch([older])
    await asyncio.sleep(0.05)
    assert not first.done()
    first.cancel()  # the host hung up before the result went out
    with pytest.raises(asyncio.CancelledError):
        await first
    second = await waiter.wait(ToolCall(session=None, hub=hub, request_id=2), 5.0)
    assert second.outcome is WaitOutcome.BACKLOG
    assert [item.message_id for item in second.backlog] == ["m-1"]
    third = await waiter.wait(ToolCall(session=None, hub=hub, request_id=3), 0.3)
    assert third.outcome is WaitOutcome.TIMEOUT  # handed back once, not again


@dataclass
class Line:
    """A call's way back to its host, as the test sets it (the server reads it from the SDK's transport)."""

    attached: bool = True

    def caller(self, grace_s: float) -> CallerLine:
        return CallerLine(lambda: self.attached, grace_s=grace_s, poll_s=0.01)


def waiter() -> SponsorWaiter:
    return SponsorWaiter(
        SponsorGate([Sponsor(object_id=SPONSOR)], tenant_id=None), max_timeout_s=30.0
    )


async def handed_a_reply_after_its_connection_closed(
    line: Line, grace_s: float, **call: Any
) -> tuple[DeliveryHub, asyncio.Task[WaitResult]]:
    """A wait whose connection closed a moment before a reply was handed to it (it has not looked yet)."""
    hub = DeliveryHub(DeliveryMetrics())
    wait = asyncio.create_task(
        waiter().wait(
            ToolCall(session=None, hub=hub, request_id=1, caller=line.caller(grace_s), **call), 30.0
        )
    )
    await eventually(lambda: waits(hub), "the wait in the hub")
    line.attached = False
    reply = backlog_message("m-1", 0)
    assert hub.claimable([reply]) == [reply]
    await hub.dispatch([reply])
    return hub, wait


async def test_a_wait_handed_its_reply_as_its_connection_closes_gives_it_to_the_next_wait() -> None:
    hub, first = await handed_a_reply_after_its_connection_closed(Line(), grace_s=0.2)
    assert (await first).outcome is WaitOutcome.CALLER_GONE
    second = await waiter().wait(ToolCall(session=None, hub=hub, request_id=2), 5.0)
    assert second.reply is not None and second.reply.message_id == "m-1"


async def test_a_wait_whose_host_resumes_within_the_grace_answers_it() -> None:
    line = Line()
    _, first = await handed_a_reply_after_its_connection_closed(line, grace_s=30.0)
    await asyncio.sleep(0.05)
    assert not first.done()  # it waits for the host to resume its stream
    line.attached = True
    answered = await first
    assert answered.reply is not None and answered.reply.message_id == "m-1"


async def test_a_wait_whose_connection_closed_ends_before_its_timeout_and_leaves_the_hub() -> None:
    hub, line = DeliveryHub(DeliveryMetrics()), Line()
    first = asyncio.create_task(
        waiter().wait(ToolCall(session=None, hub=hub, request_id=1, caller=line.caller(0.1)), 30.0)
    )
    await eventually(lambda: waits(hub), "the wait in the hub")
    line.attached = False
    assert (await asyncio.wait_for(first, WAIT_BOUND_S)).outcome is WaitOutcome.CALLER_GONE
    assert not waits(hub) and not hub.claimable([backlog_message("m-1", 0)])


@dataclass
class Record:
    """An acknowledging host's delivery record, as the wait reaches it (HostKeeper.owe)."""

    writable: bool = True
    owed: list[str] | None = None

    async def owe(self, messages: Sequence[InboundMessage]) -> bool:
        self.owed = [m.message_id for m in messages]
        return self.writable


async def test_what_the_wait_of_a_host_that_acknowledges_could_not_answer_is_owed_to_that_host_alone() -> (
    None
):
    record = Record()
    hub, first = await handed_a_reply_after_its_connection_closed(
        Line(), grace_s=0.05, owe=record.owe
    )
    assert (await first).outcome is WaitOutcome.CALLER_GONE
    assert record.owed == ["m-1"]
    assert (
        await waiter().wait(ToolCall(session=None, hub=hub, request_id=2), 0.3)
    ).outcome is WaitOutcome.TIMEOUT


async def test_what_could_not_be_written_to_the_record_goes_back_to_the_hub() -> None:
    hub, first = await handed_a_reply_after_its_connection_closed(
        Line(), grace_s=0.05, owe=Record(writable=False).owe
    )
    assert (await first).outcome is WaitOutcome.CALLER_GONE
    second = await waiter().wait(ToolCall(session=None, hub=hub, request_id=2), 5.0)
    assert second.reply is not None and second.reply.message_id == "m-1"
