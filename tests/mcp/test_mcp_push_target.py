"""A push target hands a claimed message to its session only while the push stream is open and read, and
says whether the session took it: taken, not taken, or in doubt (then no other host is offered it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from service.delivery.hub import DeliveryHub, DispatchOutcome, Handover, TargetKind
from service.delivery.push import ChannelPush
from service.mcp.push_target import STALLED_FOR_S, PushTarget
from service.telemetry.metrics import DeliveryMetrics, Metrics
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
    return PushTarget(
        session_id="s1",
        notifier=session,
        stream_open=lambda: open_,
        **{"metrics": DeliveryMetrics(), **options},
    )


async def test_an_open_stream_gets_the_channel_push_and_latency_is_recorded() -> None:
    session, metrics = RecordingSession(), Metrics()
    push = target(session, metrics=metrics.delivery)
    assert (push.target_id, push.kind, push.is_alive()) == ("push:s1", TargetKind.PUSH, True)
    assert await push.deliver(chat_message("m-1")) is Handover.TAKEN
    [sent] = session.sent
    assert isinstance(sent, ChannelPush) and sent.params.meta.message_id == "m-1"
    assert (
        metrics.registry.get_sample_value(
            "entrabot_delivery_latency_seconds_count", {"source": "chat"}
        )
        == 1
    )


async def test_a_closed_stream_takes_nothing_so_the_hub_can_try_elsewhere() -> None:
    session = RecordingSession()
    push = target(session, open_=False)
    assert not push.is_alive()
    assert await push.deliver(chat_message("m-1")) is Handover.NOT_TAKEN
    assert session.sent == []


async def test_a_session_that_does_not_take_the_push_cannot_hold_up_the_hub() -> None:
    push = target(RecordingSession(blocked=True), send_timeout_s=0.05)
    # It may yet take it (the hand-over is the session's): in doubt, not refused.
    assert await push.deliver(chat_message("m-1")) is Handover.IN_DOUBT


async def test_a_session_that_did_not_take_a_push_in_time_is_set_aside_then_tried_again() -> None:
    now = [0.0]
    session = RecordingSession(blocked=True)
    push = target(session, send_timeout_s=0.05, monotonic=lambda: now[0])
    assert await push.deliver(chat_message("m-1")) is Handover.IN_DOUBT
    assert not push.is_alive()  # the replica claims nothing for it meanwhile
    now[0] += STALLED_FOR_S
    session.blocked = False
    assert push.is_alive() and await push.deliver(chat_message("m-2")) is Handover.TAKEN


async def test_the_hub_waits_on_a_stalled_session_once_and_offers_its_push_to_nobody_else() -> None:
    stalled_session, healthy_session = RecordingSession(blocked=True), RecordingSession()
    stalled = PushTarget(
        session_id="stalled",
        notifier=stalled_session,
        stream_open=lambda: True,
        metrics=DeliveryMetrics(),
        send_timeout_s=0.05,
    )
    healthy = PushTarget(
        session_id="healthy",
        notifier=healthy_session,
        stream_open=lambda: True,
        metrics=DeliveryMetrics(),
    )
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(stalled)
    hub.register(healthy)
    messages = [chat_message(f"m-{i}", chat_id=f"19:chat-{i}@thread.v2") for i in range(6)]
    results = await hub.dispatch(messages)
    assert stalled_session.attempts == 1
    [in_doubt] = [r for r in results if r.outcome is DispatchOutcome.IN_DOUBT]
    assert in_doubt.target_id == "push:stalled"
    delivered = [r for r in results if r.outcome is DispatchOutcome.DELIVERED]
    assert {r.target_id for r in delivered} == {"push:healthy"} and len(healthy_session.sent) == 5
    assert in_doubt.message_id not in {p.params.meta.message_id for p in healthy_session.sent}


@dataclass
class Backlog:
    """What a session's push history says of the pushes it holds that no connection took."""

    full: bool = False
    age_s: float | None = None

    def backlog_full(self) -> bool:
        return self.full

    def backlog_age_s(self) -> float | None:
        return self.age_s


async def test_a_host_whose_stream_holds_an_untaken_push_past_the_send_timeout_takes_no_more() -> (
    None
):
    backlog = Backlog()
    push = target(RecordingSession(), backlog=backlog, send_timeout_s=10.0)
    backlog.age_s = 9.9  # it is reading, just behind
    assert push.is_alive()
    backlog.age_s = 10.0
    assert not push.is_alive()
    assert await push.deliver(chat_message("m-1")) is Handover.NOT_TAKEN
    backlog.age_s = None  # it caught up
    assert push.is_alive()


async def test_a_host_whose_stream_backlog_is_full_takes_no_more() -> None:
    push = target(RecordingSession(), backlog=Backlog(full=True))
    assert not push.is_alive()
    assert await push.deliver(chat_message("m-1")) is Handover.NOT_TAKEN


class SessionTakingAsTheTimeoutFires:
    """A session whose transport takes pushes through a zero-buffer anyio stream, as the SDK's does
    (``send_notification`` hands the message to the transport's router that way), and whose host
    takes the push in the event-loop turn in which the send timeout cancels the sender. anyio then
    hands the item over and raises the cancellation all the same (MemoryObjectSendStream.send)."""

    MAX_TURNS = 1_000_000  # a bound on the wait below; the send timeout ends it long before

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[Any](0)
        self._sender: asyncio.Task[Any] | None = None
        self.taken: list[Any] = []

    async def send_notification(self, notification: Any) -> None:
        self._sender = asyncio.current_task()
        await self._send.send(notification)

    async def take_as_the_timeout_fires(self) -> None:
        # This task looks once per turn. asyncio runs the timer that cancels the sender after our step
        # of that turn, and queues the sender's own step after our next one: so the first time we see
        # the cancellation pending, the sender has not run yet, and taking the item now is the race.
        for _ in range(self.MAX_TURNS):
            if self._sender is not None and self._sender.cancelling():
                self.taken.append(self._receive.receive_nowait())
                return
            await anyio.lowlevel.checkpoint()
        raise AssertionError("the send never timed out")


async def test_a_push_taken_as_its_send_timeout_expires_reaches_no_second_host() -> None:
    stalled, spare = SessionTakingAsTheTimeoutFires(), RecordingSession()
    hub = DeliveryHub(DeliveryMetrics())
    # Registered first, the stalled host is the hub's first choice for a chat no host holds yet.
    hub.register(
        PushTarget(
            session_id="stalled",
            notifier=stalled,
            stream_open=lambda: True,
            metrics=DeliveryMetrics(),
            send_timeout_s=0.05,
        )
    )
    hub.register(
        PushTarget(
            session_id="spare", notifier=spare, stream_open=lambda: True, metrics=DeliveryMetrics()
        )
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(stalled.take_as_the_timeout_fires)
        [dispatch] = await hub.dispatch([chat_message("m-1")])

    assert len(stalled.taken) == 1, "the stalled host's session took the push as its send timed out"
    copies = len(stalled.taken) + len(spare.sent)
    assert copies == 1, f"one message, {copies} hosts got it"
    # Whether the session took it could not be known at the timeout: the hub says so, names the host
    # that may have it, and offers it to nobody else.
    assert (dispatch.outcome, dispatch.target_id) == (DispatchOutcome.IN_DOUBT, "push:stalled")
