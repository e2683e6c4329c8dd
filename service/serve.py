"""``entrabot-fleet serve``: one replica under uvicorn, with a clear line for every bad setting."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from service.app import create_app
from service.config import Settings
from service.graph.errors import TokenConfigurationError
from service.from_settings.mcp import AuthConfigError
from service.replica import Phase, Replica
from service.replica_build import build_replica
from service.storage.errors import StorageError
from service.storage.resolution import create_container_if_missing
from service.telemetry.logging import configure_logging
from service.telemetry.tracing import configure_tracing
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# SIGTERM must end the process well within Kubernetes' 30 s grace period.
GRACEFUL_SHUTDOWN_S = 6  # whole seconds: uvicorn's Config takes an int


class ServeError(Exception):
    """A setting that stops the replica from starting; the message says what to fix."""


class DrainingServer(uvicorn.Server):
    """uvicorn, but SIGTERM drains the replica before uvicorn closes the hosts' streams, and the
    replica says where it listens only once it does.

    uvicorn (and sse-starlette with it) ends open streams as soon as the signal arrives, before the
    app's lifespan shutdown runs; a claim won in that moment would be pushed into a closed stream and
    lost. So the first signal stops claiming and waits for the cycle in flight; a second one exits now.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        replica: Replica,
        on_listening: Callable[[Replica], None] | None = None,
        before_start: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(config)
        self._replica = replica
        self._on_listening = on_listening
        self._before_start = before_start
        self._draining: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # ``before_start`` runs on uvicorn's own loop, where the replica's clients will live.
        if self._before_start is not None:
            await self._before_start()
        # uvicorn runs the lifespan (the replica's start) first, then serves the socket; only then
        # may anyone be told to connect.
        await super().startup(sockets)
        if self.started and self._on_listening is not None:
            self._on_listening(self._replica)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining is not None or self._replica.phase is not Phase.RUNNING:
            super().handle_exit(sig, frame)
            return
        self._draining = asyncio.get_running_loop().create_task(self._drain_then_exit(sig, frame))

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        try:
            await self._replica.drain()
        finally:
            super().handle_exit(sig, frame)


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening address, bound before the replica starts: a port another process holds (or an
    address that is not this machine's) stops start-up with one line, before any Graph or blob call.

    By hand rather than ``uvicorn.Config.bind_socket``, which exits the process on failure and logs
    "running on" before the app has started; the options are uvicorn's own. The socket listens only
    when uvicorn serves it, after the lifespan, so nobody connects to a replica still starting.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or type(exc).__name__
        raise ServeError(
            f"cannot listen on {host}:{port} ({reason}); set ENTRABOT_PORT (or --port) to a free port, "
            "or ENTRABOT_HOST to an address of this machine"
        ) from None
    return sock


def serve(settings: Settings, *, create_container: bool = False, debug: bool = False) -> int:
    """Run one replica until SIGTERM. ``create_container``: create a missing Blob container first;
    ``debug``: keep the traceback of a start-up that failed for a reason the replica can name."""
    try:
        # One registry per replica: /metrics serves it.
        replica = build_replica(settings, metrics=Metrics())
    except (StorageError, TokenConfigurationError, AuthConfigError) as exc:
        raise ServeError(str(exc)) from None
    configure_logging(settings.log_level, replica_id=replica.replica_id)
    listener = bind_listener(settings.host, settings.port)

    def announce(r: Replica) -> None:
        print(
            f"entrabot-fleet {r.replica_id} listening on http://{settings.host}:{settings.port}/mcp; "
            f"state: {r.backend.describe()}; watching {r.watched_count} chats",
            flush=True,
        )

    async def create() -> None:
        if await create_container_if_missing(replica.backend):
            log.info("created the container: %s", replica.backend.describe())

    provider = configure_tracing(settings.otlp_endpoint, replica_id=replica.replica_id)
    app = create_app(replica)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        lifespan="on",
    )
    server = DrainingServer(
        config, replica, on_listening=announce, before_start=create if create_container else None
    )
    try:
        with _explained_start_up_failures(replica, keep_traceback=debug):
            server.run(sockets=[listener])
    except SystemExit:
        pass  # uvicorn exits 3 when the lifespan fails; the reason is reported below
    except StorageError as exc:  # only --create-container touches the store before the lifespan
        raise ServeError(f"--create-container: {exc}") from None
    finally:
        listener.close()
        if provider is not None:
            provider.shutdown()
    # uvicorn leaves started False when the lifespan failed (backend unreachable, Graph refused us).
    if replica.startup_error is not None:
        raise ServeError(f"the replica did not start: {replica.startup_error}")
    if not server.started:
        print("entrabot-fleet: the replica did not start; see the log lines above", file=sys.stderr)
        return 1
    return 0


class _DropExplainedTraceback(logging.Filter):
    """uvicorn logs the lifespan's traceback as one ERROR record; when the replica has recorded why
    it did not start (a store or Graph it could not use), ``serve`` says that in one line instead."""

    def __init__(self, replica: Replica) -> None:
        super().__init__()
        self._replica = replica

    def filter(self, record: logging.LogRecord) -> bool:
        explained = self._replica.startup_error is not None
        return not (explained and record.getMessage().startswith("Traceback"))


@contextmanager
def _explained_start_up_failures(replica: Replica, *, keep_traceback: bool) -> Iterator[None]:
    uvicorn_log = logging.getLogger("uvicorn.error")
    dropping = _DropExplainedTraceback(replica)
    if not keep_traceback:
        uvicorn_log.addFilter(dropping)
    try:
        yield
    finally:
        uvicorn_log.removeFilter(dropping)
