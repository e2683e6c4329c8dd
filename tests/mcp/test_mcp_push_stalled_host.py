"""A host that stops reading its push stream keeps what its stream took, and takes nothing more meanwhile.

Through the real server on uvicorn and two raw SSE hosts. The host stops reading at the ASGI layer (its
stream's writes stop completing, as when its socket is full), which needs no megabytes to fill buffers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.delivery.hub import Dispatch, DispatchOutcome
from tests.mcp.server_fixture import (
    LiveMcp,
    chat_message,
    eventually,
    live_mcp,
    open_raw_session,
    session_headers,
    sse_events,
)

SEND_TIMEOUT_S = 0.3
_SESSION = b"mcp-session-id"


@dataclass
class Stall:
    """An ASGI layer around /mcp that stops one session's GET stream writes while ``session`` is set."""

    session: str | None = None
    reading: asyncio.Event = field(default_factory=asyncio.Event)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        return _StallLayer(self, app)

    def stop_reading(self, session_id: str) -> None:
        self.session = session_id
        self.reading.clear()

    def read_again(self) -> None:
        self.reading.set()


@dataclass
class _StallLayer:
    # A class, not a function: Starlette's Route calls a plain function as a request handler.
    stall: Stall
    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        session = next((v.decode("latin-1") for k, v in scope["headers"] if k == _SESSION), None)

        async def stalling(message: Message) -> None:
            if message["type"] == "http.response.body" and session == self.stall.session:
                await self.stall.reading.wait()
            await send(message)

        await self.app(scope, receive, stalling)


@dataclass
class Host:
    session_id: str
    received: list[str] = field(default_factory=list)


@asynccontextmanager
async def reading(http: httpx.AsyncClient, live: LiveMcp, host: Host) -> AsyncIterator[None]:
    headers = {**session_headers(host.session_id), "Accept": "text/event-stream"}
    async with (
        http.stream("GET", live.url, headers=headers) as stream,
        anyio.create_task_group() as tg,
    ):
        assert stream.status_code == 200

        async def read() -> None:
            async for event in sse_events(stream):
                host.received.append(event.data["params"]["meta"]["message_id"])

        tg.start_soon(read)
        yield
        tg.cancel_scope.cancel()


def target_of(live: LiveMcp, host: Host) -> bool:
    return any(t.target_id == f"push:{host.session_id}" for t in live.push_targets())


async def test_a_host_that_stops_reading_keeps_its_pushes_and_the_next_go_to_another_host() -> None:
    stall = Stall()
    dispatched: list[Dispatch] = []
    async with (
        live_mcp(wrap_mcp=stall.wrap, push_send_timeout_s=SEND_TIMEOUT_S) as live,
        httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http,
    ):

        async def push(message_id: str) -> Dispatch:
            [dispatch] = await live.hub.dispatch(
                [chat_message(message_id, chat_id="19:x@thread.v2")]
            )
            dispatched.append(dispatch)
            return dispatch

        slow, other = (
            Host(await open_raw_session(http, live.url)),
            Host(await open_raw_session(http, live.url)),
        )
        async with reading(http, live, slow):
            await eventually(lambda: target_of(live, slow), "the first host's push stream")
            assert (
                await push("m-0")
            ).target_id == f"push:{slow.session_id}"  # the chat now sticks to it
            await eventually(lambda: slow.received == ["m-0"], "the first push")
            async with reading(http, live, other):
                await eventually(lambda: target_of(live, other), "the second host's push stream")

                stall.stop_reading(slow.session_id)
                for message_id in ("m-1", "m-2"):  # its stream takes them: they are its now
                    assert (await push(message_id)).target_id == f"push:{slow.session_id}"
                await eventually(
                    lambda: not target_of(live, slow),
                    "the host that stopped reading to be set aside",
                )
                assert (await push("m-3")).target_id == f"push:{other.session_id}"

                stall.read_again()
                await eventually(
                    lambda: slow.received == ["m-0", "m-1", "m-2"],
                    "what the first host's stream held",
                )
                await eventually(lambda: other.received == ["m-3"], "the push the second host took")
                await eventually(
                    lambda: target_of(live, slow),
                    "the first host to take pushes again once caught up",
                )

    assert all(d.outcome is DispatchOutcome.DELIVERED for d in dispatched)
    everywhere = slow.received + other.received
    assert sorted(everywhere) == sorted(d.message_id for d in dispatched), (
        "each push reached one host, once"
    )
