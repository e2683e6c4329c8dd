"""Building a replica from its settings: the clients, the delivery half, the MCP endpoint, the
notifications, each part given its metric group; no I/O until ``Replica.start``."""

from __future__ import annotations

import os

import httpx

from service.mcp.instructions import FLEET_INSTRUCTIONS
from service.config import Settings, default_replica_id
from service.delivery.ack_reactions import AckReactions
from service.delivery.claim_intents import ClaimIntents
from service.delivery.claim_lookup import ClaimLookup
from service.delivery.fault_points import FaultPoints
from service.delivery.host_keeper import HostKeeper
from service.delivery.host_records import HostRecords
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
    records = HostRecords(backend, metrics=metrics.ledger)
    # The test-only crash point is read from the environment, never from Settings, so no .env file
    # or chart value can turn it on.
    intents = ClaimIntents(clients.hub, records, FaultPoints.from_env(os.environ), clock=clock)
    # Off by default: a reaction is visible to everyone in the chat, so an operator chooses it.
    reactions = (
        AckReactions(
            clients.graph.messages, settings.delivery_ack_reaction, metrics=metrics.delivery
        )
        if settings.delivery_ack_reaction
        else None
    )
    keeper = HostKeeper(
        records,
        ClaimLookup(backend),
        clients.hub,
        rid,
        in_flight=intents.in_flight,
        metrics=metrics.delivery,
        clock=clock,
        redeliver_after_s=settings.delivery_redeliver_after_s,
        acknowledged_here=reactions.offer if reactions is not None else None,
        refresh_s=settings.delivery_refresh_s,
    )
    mcp = build_mcp(
        settings,
        clients.hub,
        metrics=metrics,
        http_client=http,
        instructions=FLEET_INSTRUCTIONS,
        keeper=keeper,
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
            intents=intents,
            keeper=keeper,
            ack_reactions=reactions,
        ),
        metrics=metrics,
        replica_id=rid,
        clock=clock,
    )
