"""A push target hands a claimed message to its session only while the push stream is open."""

from __future__ import annotations

import asyncio
from typing import Any

from service.delivery.hub import DeliveryHub, DispatchOutcome, TargetKind
from service.delivery.push import ChannelPush
from service.mcp.push_target import STALLED_FOR_S, PushTarget
from service.telemetry.metrics import Metrics
from tests.mcp.server_fixture import chat_message


class RecordingSession:
    def __init__(self, *, blocked: bool = False) -> None:
        self.sent: list[Any] = []
        self.blocked = blocked
        self.attempts = 0

    async def send_notification(self, notification: Any) -> None:
        self.attempts += 1
        if self.blocked:  # a host that stopped reading: the session never takes the message
            await asyncio.Event().wait()
        self.sent.append(notification)


def target(session: RecordingSession, *, open_: bool = True, **options: Any) -> PushTarget:
    return PushTarget(session_id="s1", notifier=session, stream_open=lambda: open_, **options)  # type: ignore[arg-type]


async def test_an_open_stream_gets_the_channel_push_and_latency_is_recorded() -> None:
    session, metrics = RecordingSession(), Metrics()
    push = target(session, metrics=metrics)
    assert (push.target_id, push.kind, push.is_alive()) == ("push:s1", TargetKind.PUSH, True)
    assert await push.deliver(chat_message("m-1"))
    [sent] = session.sent
    assert isinstance(sent, ChannelPush) and sent.params.meta.message_id == "m-1"
    assert metrics.registry.get_sample_value("entrabot_delivery_latency_seconds_count", {"source": "chat"}) == 1


async def test_a_closed_stream_takes_nothing_so_the_hub_can_try_elsewhere() -> None:
    session = RecordingSession()
    push = target(session, open_=False)
    assert not push.is_alive()
    assert not await push.deliver(chat_message("m-1"))
    assert session.sent == []


async def test_a_host_that_stopped_reading_cannot_hold_up_the_hub() -> None:
    push = target(RecordingSession(blocked=True), send_timeout_s=0.05)
    assert not await push.deliver(chat_message("m-1"))


async def test_a_host_that_stopped_reading_is_set_aside_then_tried_again() -> None:
    now = [0.0]
    session = RecordingSession(blocked=True)
    push = target(session, send_timeout_s=0.05, monotonic=lambda: now[0])
    assert not await push.deliver(chat_message("m-1"))
    assert not push.is_alive()  # the replica claims nothing for it meanwhile
    now[0] += STALLED_FOR_S
    session.blocked = False
    assert push.is_alive() and await push.deliver(chat_message("m-2"))


async def test_the_hub_waits_on_a_stalled_host_once_not_for_every_message() -> None:
    stalled_session, healthy_session = RecordingSession(blocked=True), RecordingSession()
    stalled = PushTarget(session_id="stalled", notifier=stalled_session, stream_open=lambda: True,  # type: ignore[arg-type]
                         send_timeout_s=0.05)
    healthy = PushTarget(session_id="healthy", notifier=healthy_session, stream_open=lambda: True)  # type: ignore[arg-type]
    hub = DeliveryHub()
    hub.register(stalled)
    hub.register(healthy)
    messages = [chat_message(f"m-{i}", chat_id=f"19:chat-{i}@thread.v2") for i in range(6)]
    results = await hub.dispatch(messages)
    assert [r.outcome for r in results] == [DispatchOutcome.DELIVERED] * 6
    assert {r.target_id for r in results} == {"push:healthy"}
    assert stalled_session.attempts <= 1 and len(healthy_session.sent) == 6
