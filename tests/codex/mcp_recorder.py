"""A recording HTTP proxy in front of one replica's ``/mcp``: what Codex sent the fleet and what came back.

The replica's own logs say little of a host's side of the protocol (the version asked for, ``_meta`` on a
tool call, what its GET stream carried), and a test must not read another process's log format for it.
So Codex talks to this proxy, which forwards every request unchanged (headers, body; the replica's
Host check sees its own address) and streams every answer back as it comes, POST answers and the
long-lived GET stream alike, while recording each JSON-RPC message on the way: the request bodies,
and the JSON or SSE ``data:`` messages of each answer, as they pass.

A test may hold back one answer (``hold_answer``): the proxy reads it from the replica in full, records
it, and passes it on only after the host cancelled the request. That is the answer and the cancel
crossing on the wire, as when a result comes just at the host's tool timeout: the fleet gave the
result out, and the host never had it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from service.devstack.uvicorn_runner import serve_app

HOLD_BOUND_S = 60.0  # a held answer is passed on by then even if the host never cancels
# Hop-by-hop headers, and the ones the proxy's own HTTP stack sets for the leg it speaks.
_DROPPED = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}


def _messages(raw: bytes) -> list[dict[str, Any]]:
    """JSON-RPC messages in a JSON body (one, or a batch)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [m for m in items if isinstance(m, dict)]


@dataclass
class Exchange:
    """One HTTP request to ``/mcp`` and its answer, recorded as they pass."""

    method: str
    headers: dict[str, str]
    sent: list[dict[str, Any]]
    started_at: float
    status: int | None = None
    content_type: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    _buffer: bytes = b""

    def feed(self, chunk: bytes) -> None:
        """Part of the answer: SSE events are recorded as each completes, a JSON body at its end."""
        self._buffer += chunk
        if "text/event-stream" not in self.content_type:
            return
        self._buffer = self._buffer.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            data = b"\n".join(
                line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")
            )
            if data:
                self.received.extend(_messages(data))

    def end(self) -> None:
        if "application/json" in self.content_type:
            self.received.extend(_messages(self._buffer))
        self.finished = True


@dataclass
class HeldAnswer:
    """The answer to the first request ``matches`` picks, kept from the host until it cancels that
    request (``notifications/cancelled``) or ``HOLD_BOUND_S`` passed."""

    matches: Callable[[dict[str, Any]], bool]
    request: dict[str, Any] | None = None  # the request held, once the host sent it
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self, sent: list[dict[str, Any]]) -> bool:
        if self.request is not None:
            return False
        self.request = next((m for m in sent if "id" in m and self.matches(m)), None)
        return self.request is not None

    def note_cancels(self, sent: list[dict[str, Any]]) -> None:
        if self.request is None:
            return
        for message in sent:
            if (
                message.get("method") == "notifications/cancelled"
                and (message.get("params") or {}).get("requestId") == self.request["id"]
            ):
                self.cancelled.set()


@dataclass
class McpRecorder:
    upstream: str  # the replica's /mcp
    port: int = 0
    exchanges: list[Exchange] = field(default_factory=list)
    holds: list[HeldAnswer] = field(default_factory=list)

    def hold_answer(self, matches: Callable[[dict[str, Any]], bool]) -> HeldAnswer:
        """Hold back the answer to the next request ``matches`` picks until the host cancels it."""
        held = HeldAnswer(matches)
        self.holds.append(held)
        return held

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def sent(self, method: str) -> list[dict[str, Any]]:
        """Every JSON-RPC message with ``method`` that the host sent, oldest first."""
        return [m for e in self.exchanges for m in e.sent if m.get("method") == method]

    def answer_to(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The fleet's answer to one request the host sent (matched by id in the same exchange)."""
        for exchange in self.exchanges:
            if any(m is request for m in exchange.sent):
                return next(
                    (m for m in exchange.received if m.get("id") == request.get("id")), None
                )
        return None

    def get_streams(self) -> list[Exchange]:
        """The GET (standalone) streams the host opened, as the fleet answered them."""
        return [e for e in self.exchanges if e.method == "GET"]

    def pushed(self, method: str) -> list[dict[str, Any]]:
        """Notifications with ``method`` that reached the host on a GET stream."""
        return [m for e in self.get_streams() for m in e.received if m.get("method") == method]


def _app(recorder: McpRecorder, http: httpx.AsyncClient) -> Starlette:
    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROPPED]
        exchange = Exchange(
            request.method, dict(request.headers), _messages(body) if body else [], time.time()
        )
        recorder.exchanges.append(exchange)
        for held in recorder.holds:
            held.note_cancels(exchange.sent)
        holding = next((h for h in recorder.holds if h.take(exchange.sent)), None)
        upstream = await http.send(
            http.build_request(request.method, recorder.upstream, headers=headers, content=body),
            stream=True,
        )
        exchange.status = upstream.status_code
        exchange.content_type = upstream.headers.get("content-type", "")

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in upstream.aiter_raw():
                exchange.feed(chunk)
                yield chunk
            exchange.end()

        async def relay_after_cancel(held: HeldAnswer) -> AsyncIterator[bytes]:
            chunks = []
            async for chunk in upstream.aiter_raw():
                exchange.feed(chunk)
                chunks.append(chunk)
            exchange.end()
            try:
                async with asyncio.timeout(HOLD_BOUND_S):
                    await held.cancelled.wait()
            except TimeoutError:
                pass  # never cancelled: passed on late, and the test sees the call did not fail
            for chunk in chunks:
                yield chunk

        return StreamingResponse(
            relay() if holding is None else relay_after_cancel(holding),
            status_code=upstream.status_code,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED},
            background=BackgroundTask(upstream.aclose),
        )

    return Starlette(routes=[Route("/mcp", forward, methods=["GET", "POST", "DELETE"])])


@asynccontextmanager
async def mcp_recorder(upstream: str) -> AsyncIterator[McpRecorder]:
    """A recording proxy to ``upstream`` on a free loopback port, until the block exits."""
    recorder = McpRecorder(upstream)
    # No read timeout: the GET stream stays open and quiet for as long as the host is connected.
    timeout = httpx.Timeout(10.0, read=None)
    async with (
        httpx.AsyncClient(timeout=timeout) as http,
        serve_app(_app(recorder, http)) as server,
    ):
        recorder.port = server.port
        yield recorder
