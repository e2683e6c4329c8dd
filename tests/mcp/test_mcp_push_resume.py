"""A push made while a host resumes its push stream with Last-Event-ID reaches it, once (issue 22).

The real thing throughout: the fleet's MCP server on uvicorn, the Python SDK client resuming its GET
stream after a drop, a TCP balancer between them to drop it. The push is made at the exact moment
that lost it before the fix: while the resumed stream is writing its replay to the wire, after the SDK
copied the history for the replay and before it attached the live stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit

from mcp.client import Client
from mcp_types import Implementation
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.delivery.hub import Dispatch, DispatchOutcome
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from tests.bridge.tcp_balancer import TcpBalancer, tcp_balancer
from tests.mcp.server_fixture import (
    WAIT_BOUND_S,
    ChannelListener,
    LiveMcp,
    chat_message,
    eventually,
    live_mcp,
)

_LAST_EVENT_ID = b"last-event-id"


@dataclass
class DuringReplay:
    """An ASGI layer around /mcp: before the first SSE event of a resumed GET stream goes to the wire,
    it runs ``action`` (once), and only then lets the event out."""

    action: Callable[[], Awaitable[None]] | None = None
    fired: bool = False
    resumed_from: list[str] = field(default_factory=list)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        return _Layer(self, app)

    async def around(self, message: Message, send: Send) -> None:
        if message["type"] == "http.response.body" and message.get("body") and not self.fired:
            self.fired = True
            if self.action is not None:
                await self.action()
        await send(message)


@dataclass
class _Layer:
    # A class, not a function: Starlette's Route calls a plain function as a request handler.
    hook: DuringReplay
    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        resume = _last_event_id(scope)
        if resume is None:
            await self.app(scope, receive, send)
            return
        self.hook.resumed_from.append(resume)
        await self.app(scope, receive, partial(self.hook.around, send=send))


def _last_event_id(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == _LAST_EVENT_ID), None)


@asynccontextmanager
async def resuming_host(
    hook: DuringReplay,
) -> AsyncIterator[tuple[LiveMcp, TcpBalancer, ChannelListener]]:
    """The server, a balancer before it, and a push host (the Python SDK client) connected through it."""
    listener = ChannelListener()
    async with live_mcp(wrap_mcp=hook.wrap) as live:
        parts = urlsplit(live.url)
        async with tcp_balancer([(parts.hostname or "127.0.0.1", parts.port or 80)]) as balancer:
            client = Client(
                balancer.url(),
                mode="legacy",
                extensions=[listener],
                read_timeout_seconds=WAIT_BOUND_S,
                client_info=Implementation(name=BRIDGE_PUSH_CLIENT_NAME, version="resume-test"),
            )
            async with client:
                await eventually(live.push_targets, "the host's push stream")
                yield live, balancer, listener


async def test_a_push_made_during_a_last_event_id_replay_arrives_once() -> None:
    hook = DuringReplay()
    dispatched: list[Dispatch] = []
    async with resuming_host(hook) as (live, balancer, listener):

        async def push(*message_ids: str) -> None:
            dispatched.extend(await live.hub.dispatch([chat_message(m) for m in message_ids]))

        await push("m-1")
        await eventually(lambda: listener.message_ids() == ["m-1"], "the first push at the host")
        # The connection dies silently: two pushes go into it and never arrive, so the host's resume
        # from m-1's event id has something to replay.
        balancer.swallow_replies()
        await push("m-2", "m-3")

        async def push_during_replay() -> None:
            assert live.push_targets(), (
                "the resumed stream is the session's push target while it replays"
            )
            await push("m-during")

        hook.action = push_during_replay
        balancer.cut()
        await eventually(
            lambda: hook.fired, "the host to resume its push stream and the replay to begin"
        )
        await eventually(live.push_targets, "the resumed push stream")
        await push("m-after")
        await eventually(lambda: "m-after" in listener.message_ids(), "the push after the resume")

        assert hook.resumed_from, "the host resumed with Last-Event-ID"
        delivered = [d.message_id for d in dispatched if d.outcome is DispatchOutcome.DELIVERED]
        assert delivered == ["m-1", "m-2", "m-3", "m-during", "m-after"]
        received = listener.message_ids()
        assert sorted(received) == sorted(delivered), (
            f"reported DELIVERED {delivered}, the host got {received}"
        )
        assert received == ["m-1", "m-2", "m-3", "m-during", "m-after"]  # in order, each once
