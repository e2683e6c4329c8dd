"""The client half of one replica: its Graph clients, the fleet's shared Graph hold and the gate.

``build_replica`` and every test harness that builds a replica call ``build_clients``, so a part added
here (the fleet back-off hold was one the harness copies had left out) is in the tests too. No I/O:
the backend check, the agent lookup and the loops belong to ``Replica.start``.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from service.config import Settings
from service.domain.agent import AgentUser
from service.domain.sponsors import SponsorGate
from service.from_settings.graph_auth import token_provider_from_settings
from service.graph.auth import AgentUserTokenProvider, TokenProvider
from service.graph.client import GraphClient
from service.graph.options import GraphOptions
from service.graph.errors import (
    GraphConnectionError,
    GraphError,
    GraphServerError,
    GraphThrottled,
    TokenAcquisitionError,
)
from service.graph.retry_policy import RetryPolicy
from service.ledger.fleet.graph_backoff import FleetBackoff
from service.from_settings.signin import delegated_token_provider
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics


@dataclass(frozen=True)
class ReplicaClients:
    """What the workers talk through. ``directory`` is the agent identity's app-only Graph client (the
    sponsors; None in delegated mode, which has no agent identity); the gate starts empty and is filled
    by discovery (in delegated mode by the wiring, with the signed-in person)."""

    tokens: TokenProvider
    graph: GraphClient
    directory: GraphClient | None
    graph_backoff: FleetBackoff
    gate: SponsorGate


def build_clients(
    settings: Settings,
    backend: MemoryBackend,
    http: httpx.AsyncClient,
    *,
    replica_id: str,
    metrics: Metrics,
    tokens: TokenProvider | None = None,
    retry_policy: RetryPolicy | None = None,
) -> ReplicaClients:
    """``tokens``: the provider, when the caller needed it before the backend (Blob tokens) or built it
    from other credentials; ``retry_policy``: the Graph client's (default: the service's)."""
    tokens = tokens or replica_tokens(
        settings, backend, http, replica_id=replica_id, metrics=metrics
    )
    # On real time, like the Graph client's own holds: a Retry-After is a wall-clock promise.
    graph_backoff = FleetBackoff(
        backend, replica_id, metrics=metrics.roles, ledger_metrics=metrics.ledger
    )
    graph = GraphClient(
        GraphOptions(settings.graph_url, retry=retry_policy or RetryPolicy()),
        tokens,
        http=http,
        metrics=metrics.graph,
        shared_hold=graph_backoff,
    )
    directory = (
        graph.with_tokens(tokens.agent_identity_tokens())
        if isinstance(tokens, AgentUserTokenProvider)
        else None
    )
    return ReplicaClients(
        tokens=tokens,
        graph=graph,
        directory=directory,
        graph_backoff=graph_backoff,
        gate=SponsorGate((), tenant_id=settings.tenant_id),
    )


def replica_tokens(
    settings: Settings,
    backend: MemoryBackend,
    http: httpx.AsyncClient,
    *,
    replica_id: str,
    metrics: Metrics,
) -> TokenProvider:
    """Whom the replica acts as, by ENTRABOT_AUTH_MODE: the agent user (three hops), or the signed-in
    person whose sealed record is in ``backend`` (delegated mode). TokenConfigurationError names what
    to set."""
    if settings.auth_mode == "delegated":
        return delegated_token_provider(
            settings, backend, http, replica_id=replica_id, metrics=metrics
        )
    return token_provider_from_settings(settings, http, metrics=metrics.graph)


async def load_agent_user(graph: GraphClient, *, posts_as_person: bool = False) -> AgentUser:
    """Who the Graph token acts as (GET /me): the agent user, or in delegated mode the signed-in person."""
    me = await graph.directory.get_me()
    return AgentUser(
        me.id, me.user_principal_name, me.display_name, me.mail, posts_as_person=posts_as_person
    )


def answered_later(exc: GraphError) -> bool:
    """Graph (or Entra) is there but busy: worth a short wait before giving up on start-up."""
    if isinstance(exc, (GraphServerError, GraphThrottled)):
        return True
    status = exc.status if isinstance(exc, TokenAcquisitionError) else None
    return status is not None and (status >= 500 or status == 429)


def naming_graph_url(exc: GraphError, graph_url: str) -> GraphError:
    """The same error, its message naming ENTRABOT_GRAPH_URL when Graph itself did not answer."""
    if isinstance(exc, (GraphConnectionError, GraphServerError)):
        return type(exc)(
            f"{exc}; check ENTRABOT_GRAPH_URL ({graph_url}) and the network path to it",
            status=exc.status,
            code=exc.code,
            request_id=exc.request_id,
        )
    return exc
