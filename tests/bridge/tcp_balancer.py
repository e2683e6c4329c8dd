"""A loopback TCP balancer in front of replicas, as a Service or an ingress would be, with a cut switch.

Each new connection goes first to the upstream the last one went to, then to the others in order:
while a replica lives every connection lands on it (what hashing the affinity header gives one
host), and when it dies new connections land on the next. ``cut()`` drops every open connection without touching
the replicas, which is a dropped stream as the bridge sees it; ``swallow_replies()`` first makes
what the replicas send vanish on the way (as on a connection dying silently), so a push the replica
counts as sent never reaches the bridge except by replay; ``reset_when_sent(marker)`` resets the next
connection that carries ``marker`` towards a replica before forwarding it (a POST dying on the wire).
Hand-written: a few lines of asyncio,
where no TCP proxy library here offers the cut.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

_CHUNK = 65536


@dataclass
class TcpBalancer:
    upstreams: Sequence[tuple[str, int]]
    port: int = 0
    connections: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = field(
        default_factory=list
    )
    routed: dict[int, int] = field(default_factory=dict)  # upstream port -> connections sent there

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def cut(self) -> None:
        for client, upstream in self.connections:
            for writer in (client, upstream):
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        self.connections.clear()
        self.swallowing = False

    last: tuple[str, int] | None = None
    swallowing: bool = False

    reset_marker: bytes | None = None
    resets: int = 0

    def swallow_replies(self) -> None:
        self.swallowing = True

    def reset_when_sent(self, marker: bytes) -> None:
        self.reset_marker = marker

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        order = sorted(self.upstreams, key=lambda upstream: upstream != self.last)
        for host, port in order:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                continue
            self.last = (host, port)
            self.routed[port] = self.routed.get(port, 0) + 1
            pair = (writer, up_writer)
            self.connections.append(pair)

            def reset(chunk: bytes) -> bool:
                if self.reset_marker is None or self.reset_marker not in chunk:
                    return False
                self.reset_marker = None
                self.resets += 1
                for side in pair:
                    side.transport.abort()
                return True

            await asyncio.gather(
                _pipe(reader, up_writer, reset), _pipe(up_reader, writer, lambda _: self.swallowing)
            )
            with contextlib.suppress(ValueError):
                self.connections.remove(pair)
            return
        writer.transport.abort()  # no upstream: the client sees a reset, as behind a Service with no endpoint


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    drop: Callable[[bytes], bool] = lambda _: False,
) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            if drop(chunk):
                continue
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.transport.abort() if writer.transport.is_closing() else writer.close()


@asynccontextmanager
async def tcp_balancer(upstreams: Sequence[tuple[str, int]]) -> AsyncIterator[TcpBalancer]:
    balancer = TcpBalancer(list(upstreams))
    server = await asyncio.start_server(balancer._accept, "127.0.0.1", 0)
    balancer.port = server.sockets[0].getsockname()[1]
    try:
        yield balancer
    finally:
        balancer.cut()
        server.close()
