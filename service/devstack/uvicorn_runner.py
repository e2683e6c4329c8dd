"""Serve an ASGI app under a real uvicorn server inside the running event loop, on a free loopback port.

For tests and local tools that need real HTTP (real clients, real streams) while still reaching the
app's objects directly: the server runs as a task of the caller's loop, so the caller can await the
app's own coroutines (say, a hub dispatch) between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import uvicorn

STARTUP_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class RunningServer:
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class _InLoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals belong to whoever owns the process (pytest, the CLI), not to a server inside it.
        yield


@contextlib.asynccontextmanager
async def serve_app(
    app: object,
    *,
    host: str = "127.0.0.1",
    graceful_shutdown_s: int = 2,  # uvicorn takes whole seconds
    log_level: str = "warning",
) -> AsyncIterator[RunningServer]:
    """Run ``app`` (with its lifespan) until the block exits; yields where it listens.

    Open streaming responses get ``graceful_shutdown_s`` to finish when the block exits, then are
    cancelled, so a client that forgot to close its stream cannot hang the caller.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=graceful_shutdown_s,
        access_log=False,
    )
    server = _InLoopServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # raises the startup failure
                    raise RuntimeError("uvicorn stopped before it started serving")
                await asyncio.sleep(0.01)
        yield RunningServer(host, port)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
