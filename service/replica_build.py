"""Building a replica from its settings: the clients, the delivery half (``wiring.wire_delivery``), the
MCP endpoint, the notifications, each part given its metric group; no I/O until ``Replica.start``."""

from __future__ import annotations

import os

import httpx

from service.mcp.instructions import HOST_INSTRUCTIONS
from service.config import Settings, default_replica_id
from service.delivery.fault_points import FaultPoints
from service.from_settings.graph_auth import token_provider_from_settings
from service.graph.auth import storage_token_provider
from service.from_settings.signin import check_delegated_settings
from service.from_settings.storage import storage_options
from service.replica_clients import (
    build_clients,
)
from service.graph.http_pool import new_http_client
from service.clock import Clock, utc_now
from service.from_settings.mcp import build_mcp, check_auth_config
from service.from_settings.notifications import notifications_from_settings
from service.storage.backend import MemoryBackend
from service.storage.resolution import BlobChoice, choose_backend, get_backend
from service.telemetry.metrics import Metrics
from service.replica import Replica, Served
from service.wiring import wire_delivery


def build_replica(
    settings: Settings,
    *,
    backend: MemoryBackend | None = None,
    is_cloud: bool | None = None,
    http: httpx.AsyncClient | None = None,
    metrics: Metrics,
    clock: Clock = utc_now,
    replica_id: str | None = None,
) -> Replica:
    """Build (no I/O) a replica. Raises on bad configuration before anything touches the network:
    ``BackendMisconfiguredError``, ``TokenConfigurationError``, ``AuthConfigError``."""
    check_auth_config(settings)
    http = http or new_http_client(read_timeout_s=settings.graph_timeout_s)
    rid = replica_id or settings.replica_id or default_replica_id()
    delegated = settings.auth_mode == "delegated"
    if delegated:
        check_delegated_settings(
            settings
        )  # before the backend: its Blob auth cannot be the agent user's
    # Agent-user mode: the tokens first, since the agent user's storage token may be the Blob credential.
    # Delegated mode: the backend first, since the signed-in person's tokens are kept in it.
    tokens = (
        None if delegated else token_provider_from_settings(settings, http, metrics=metrics.graph)
    )
    if backend is None:
        is_cloud = isinstance(choose_backend(storage_options(settings)), BlobChoice)
        backend = get_backend(
            storage_options(settings),
            metrics=metrics.storage,
            storage_token_provider=storage_token_provider(tokens) if tokens else None,
        )
    clients = build_clients(settings, backend, http, replica_id=rid, metrics=metrics, tokens=tokens)
    # The test-only crash points are read from the environment, never from Settings, so no .env file
    # or chart value can turn one on.
    delivery = wire_delivery(
        settings,
        backend,
        replica_id=rid,
        metrics=metrics,
        graph=clients.graph,
        faults=FaultPoints.from_env(os.environ),
        clock=clock,
    )
    mcp = build_mcp(
        settings,
        delivery.hub,
        metrics=metrics,
        http_client=http,
        instructions=HOST_INSTRUCTIONS,
        keeper=delivery.keeper,
        inbox=delivery.inbox,
    )
    return Replica(
        settings=settings,
        backend=backend,
        is_cloud=bool(is_cloud),
        http=http,
        clients=clients,
        served=Served(
            mcp=mcp,
            notifications=notifications_from_settings(settings, backend, metrics.changes, clock),
            delivery=delivery,
        ),
        metrics=metrics,
        replica_id=rid,
        clock=clock,
    )
