"""A sponsor wait whose host goes away while it holds claimed messages hands them back: the next wait gets
them, once (issue 22 item 3). Without that, the sponsor's claimed messages reached nobody."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from service.delivery.hub import DeliveryHub, DeliveryTarget, TargetKind
from service.delivery.message import InboundMessage, Source
from service.delivery.sponsors import Sponsor, SponsorGate
from service.mcp.tool_registry import ToolCall
from service.tools.sponsor_wait import SponsorWaiter, WaitOutcome
from tests.mcp.server_fixture import eventually

SPONSOR = "sponsor-1"


def backlog_message(mid: str, minutes_ago: int) -> InboundMessage:
    """A sponsor's message written before the waits began (backlog: a wait takes several of these)."""
    return InboundMessage(Source.CHAT, "19:c1", mid, SPONSOR, "Grace",
                          datetime.now(timezone.utc) - timedelta(minutes=minutes_ago), "yes, ship it",
                          sender_is_sponsor=True)


def waits(hub: DeliveryHub) -> list[DeliveryTarget]:
    return [t for t in hub.live_targets() if t.kind is TargetKind.SPONSOR_WAIT]


async def test_messages_held_by_a_wait_whose_host_left_go_to_the_next_wait_once() -> None:
    hub = DeliveryHub()
    waiter = SponsorWaiter(SponsorGate([Sponsor(object_id=SPONSOR)], tenant_id=None), max_timeout_s=30.0)
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
