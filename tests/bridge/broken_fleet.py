"""A fleet endpoint that answers every request the same wrong way: a status, garbage, or nothing at all.

Raw asyncio rather than an ASGI app, so "garbage" and "nothing" are exactly that on the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import Enum


class Fault(str, Enum):
    UNAUTHORIZED = "401"
    FORBIDDEN = "403"
    SERVER_ERROR = "503"
    GARBAGE = "garbage"
    SILENCE = "silence"


def _response(status: str, content_type: str, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


_RESPONSES = {
    Fault.UNAUTHORIZED: _response(
        "401 Unauthorized",
        "application/json",
        b'{"error": "invalid_token"}',
        'WWW-Authenticate: Bearer error="invalid_token"\r\n',
    ),
    Fault.FORBIDDEN: _response("403 Forbidden", "text/plain", b"forbidden"),
    Fault.SERVER_ERROR: _response("503 Service Unavailable", "text/plain", b"busy"),
    # Claims JSON, is not: what a misrouted ingress or a captive portal might send.
    Fault.GARBAGE: _response("200 OK", "application/json", b"<html>oops</html>"),
}


@dataclass
class BrokenFleet:
    url: str
    requests: int = 0


@asynccontextmanager
async def broken_fleet(fault: Fault) -> AsyncIterator[BrokenFleet]:
    fleet = BrokenFleet(url="")
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                fleet.requests += 1
                if fault is Fault.SILENCE:
                    held.append(writer)  # keep the connection open and never answer
                    continue
                writer.write(_RESPONSES[fault])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fleet.url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield fleet
    finally:
        for writer in held:
            writer.close()
        server.close()
