"""The FastAPI app of one replica: /mcp, /healthz, /readyz, /metrics; the lifespan runs the replica.

replica = build_replica(Settings(), metrics=Metrics())  # raises on bad configuration, touches no network
app = create_app(replica)                 # uvicorn runs it; the lifespan starts and stops the workers
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import BaseRoute

from service import __version__
from service.replica import Phase, Replica
from service.graph.errors import GraphError
from service.ledger.fleet.lease_roster import read_lease_roster
from service.mcp.host_view import hosts_view
from service.storage.errors import StorageError
from service.telemetry.http_metrics import McpHttpMetrics

log = logging.getLogger(__name__)

READINESS_CHECK_TTL_S = 5.0
READINESS_CHECK_TIMEOUT_S = 3.0
READYZ_CHAT_IDS_SHOWN = 20
# Inside the readiness probe's 3 s timeout (the chart's), read alongside the backend check.
LEASE_ROSTER_TIMEOUT_S = 2.0


class _BackendProbe:
    """A cached reachability check, so a probe every few seconds costs one blob call at most."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        self._checked_at = -1e9
        self._error: str | None = "not checked yet"

    async def error(self) -> str | None:
        now = time.monotonic()
        if now - self._checked_at >= READINESS_CHECK_TTL_S:
            self._checked_at = now
            try:
                await asyncio.wait_for(self._replica.backend.check(), READINESS_CHECK_TIMEOUT_S)
                self._error = None
            except (StorageError, TimeoutError) as exc:
                self._error = f"backend unreachable: {type(exc).__name__}"
        return self._error


class _LeaseRoster:
    """Who holds each fleet-singleton role, for /readyz detail: the lease records present under
    ``leases/``, read at most once per READINESS_CHECK_TTL_S (a listing and one read per role).
    Information only: an unreadable record or listing is reported, never a readiness problem."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        self._checked_at = -1e9
        self._detail: dict[str, Any] = {"roles": {}}

    async def detail(self) -> dict[str, Any]:
        now = time.monotonic()
        if now - self._checked_at >= READINESS_CHECK_TTL_S:
            self._checked_at = now
            me = self._replica.replica_id
            try:
                roster = await asyncio.wait_for(
                    read_lease_roster(self._replica.backend, self._replica.clock()),
                    LEASE_ROSTER_TIMEOUT_S,
                )
                self._detail = {"roles": {h.role: h.as_json(me) for h in roster}}
            except Exception as exc:  # noqa: BLE001 - whatever failed, readiness answers; the detail says so
                self._detail = {
                    "roles": {},
                    "error": f"lease records unreadable: {type(exc).__name__}",
                }
        return self._detail


def create_app(replica: Replica) -> FastAPI:
    probe = _BackendProbe(replica)
    roster = _LeaseRoster(replica)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await replica.start()
        except (StorageError, GraphError) as exc:
            # Kept for `serve`, which turns it into one line saying what to fix.
            replica.startup_error = f"{type(exc).__name__}: {exc}"
            await replica.stop()
            raise
        try:
            async with replica.served.mcp.lifespan():
                yield
                # Shutdown begins: no new claims; streams close when the MCP lifespan ends.
                replica.served.delivery.hub.close()
        finally:
            await replica.stop()

    # Graph's webhook (POST /graph/notifications) on every replica, when notifications are configured.
    notifications: list[BaseRoute] = []
    if replica.served.notifications is not None:
        notifications += replica.served.notifications.receiver.routes()
    app = FastAPI(
        title="entrabot-fleet",
        version=__version__,
        lifespan=lifespan,
        routes=replica.served.mcp.routes() + notifications,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(McpHttpMetrics, metrics=replica.metrics.mcp)

    @app.get("/healthz")
    async def healthz() -> Response:
        """Liveness: the event loop answers and no loop has crashed (a crash restarts the pod)."""
        failed = [s.name for s in replica.supervisor.statuses if s.state.value == "failed"]
        if failed:
            return JSONResponse({"status": "failed", "failed_loops": failed}, status_code=503)
        return JSONResponse({"status": "ok", "replica": replica.replica_id})

    @app.get("/readyz")
    async def readyz() -> Response:
        problems: list[str] = []
        if replica.phase is not Phase.RUNNING:
            problems.append(f"replica {replica.phase.value}")
        if not replica.supervisor.healthy:
            problems += [
                f"loop {s.name} {s.state.value}"
                for s in replica.supervisor.statuses
                if s.state.value != "running"
            ]
        backend_error, leases = await asyncio.gather(probe.error(), roster.detail())
        if backend_error:
            problems.append(backend_error)
        corrupt = replica.corrupt_cursors.chat_ids
        keeper = replica.served.delivery.keeper
        body = {
            "ready": not problems,
            "replica": replica.replica_id,
            "problems": problems,
            "watched_chats": replica.watched_count,
            "loops": {s.name: s.state.value for s in replica.supervisor.statuses},
            # Not a problem for readiness: these chats are stalled everywhere, this replica serves
            # the rest; the operator repairs each with `entrabot-fleet repair-chat`.
            "corrupt_chat_cursors": {
                "count": len(corrupt),
                "chat_ids": list(corrupt[:READYZ_CHAT_IDS_SHOWN]),
            },
            # Who holds each fleet-singleton role (every role with a lease record in the container),
            # as the lease records say; not a problem for readiness either way.
            "leases": leases,
            # The hosts connected here: no token, session id or message body (service.mcp.host_view).
            # Inbox hosts (receive_messages) are listed apart: between calls they have no session.
            "hosts": {
                **hosts_view(replica.served.mcp.sessions, keeper.owed_by_age),
                "inbox": replica.served.delivery.inbox.status(),
            },
            # Acknowledged delivery to the hosts this replica serves (docs/delivery.md).
            "deliveries": keeper.status(),
        }
        return JSONResponse(body, status_code=200 if not problems else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(replica.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
