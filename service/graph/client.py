"""The Graph client: the resources the workers and MCP tools call, over one transport.

``GraphClient`` only builds the transport and the resource clients, and exposes these as ``chats``,
``messages``, ``mail``, ``directory``, ``files``, ``subscriptions`` and ``channels``; the request loop
and its rules are in ``transport``, each route's Graph facts beside its method in ``resources``.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from collections.abc import Awaitable, Callable

import httpx

from service.graph.auth.tokens import TokenProvider
from service.graph.http_pool import new_http_client
from service.graph.options import GraphOptions
from service.graph.pacing import GraphPacing, PacingRules, SharedHold
from service.graph.resources.channels import GraphChannels
from service.graph.resources.chats import GraphChats
from service.graph.resources.directory import GraphDirectory
from service.graph.resources.files import GraphFiles
from service.graph.resources.mail import GraphMail
from service.graph.resources.messages import GraphMessages
from service.graph.resources.subscriptions import GraphSubscriptions
from service.graph.retrying import RetryLayer
from service.graph.transport import GraphSender, GraphTransport
from service.graph.urls import GraphUrls
from service.telemetry.metrics import GraphMetrics


class GraphClient:
    def __init__(
        self,
        options: GraphOptions,
        token_provider: TokenProvider,
        *,
        metrics: GraphMetrics,
        http: httpx.AsyncClient | None = None,
        shared_hold: SharedHold | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        urls = GraphUrls(options.base_url)
        self._owns_http = http is None
        self._http = http if http is not None else new_http_client()
        rng = rng or random.Random()
        # ``shared_hold`` carries the client's holds across the fleet: the replicas share the budget.
        pacing = GraphPacing(
            PacingRules(max_hold_s=options.retry.max_retry_after),
            clock=clock,
            sleep=sleep,
            rng=rng,
            metrics=metrics,
            shared=shared_hold,
        )
        transport = GraphTransport(
            urls,
            token_provider,
            scope=options.scope,
            sender=GraphSender(self._http, metrics),
            retry=RetryLayer(options.retry, clock=clock, sleep=sleep, rng=rng),
            pacing=pacing,
        )
        self._expose(transport)

    def _expose(self, transport: GraphTransport) -> None:
        self._transport = transport
        self.chats = GraphChats(transport)
        self.messages = GraphMessages(transport)
        self.mail = GraphMail(transport)
        self.directory = GraphDirectory(transport)
        self.files = GraphFiles(transport)
        self.subscriptions = GraphSubscriptions(transport)
        self.channels = GraphChannels(transport)  # Teams teams, channels and channel messages

    def with_tokens(self, token_provider: TokenProvider) -> GraphClient:
        """This client's Graph, connections, metrics, retry rules and holds, acting with other tokens (the
        agent identity's app-only ones, for the directory reads Graph takes no delegated token for)."""
        # A copy rather than a second __init__: the transport below is this one's, holds included.
        client = copy.copy(self)
        client._owns_http = False
        client._expose(self._transport.with_tokens(token_provider))
        return client

    async def aclose(self) -> None:
        """Close the HTTP client if this GraphClient created it (a shared one belongs to the app)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> GraphClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
