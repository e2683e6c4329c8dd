"""The agent user's token, in three hops against Entra (Entra Agent ID's user_fic flow).

Hop 1: the blueprint app, with its own credential and ``fmi_path`` = the agent identity → T1.
Hop 2: the agent identity, with T1 as its client assertion → T2.
Hop 3: ``user_fic``: the agent identity with T1, plus T2 as the agent user's federated credential
       → a token that acts as the agent user for one resource scope.

Hop 2 asked for a resource (Graph) instead of the exchange audience gives the agent identity's own
app-only token (``agent_identity_tokens``): what Graph requires where it takes no delegated token at
all, e.g. "List agentIdentity sponsors" (application permission AgentIdentity.ReadWrite.All).

T1 and T2 are cached like the user tokens (one per scope), each until ``refresh_margin_s`` before
expiry, and every key refreshes single-flight: a hundred concurrent callers make one request per hop.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from service.graph.auth.cache import SingleFlightTokenCache
from service.graph.auth.credentials import BlueprintCredential
from service.graph.auth.hop_forms import (
    EXCHANGE_SCOPE,
    agent_identity_form,
    blueprint_form,
    user_fic_form,
)
from service.graph.auth.token_endpoint import TokenEndpoint, token_url
from service.graph.auth.tokens import AccessToken, TokenProvider
from service.graph.errors import TokenAcquisitionError
from service.telemetry.metrics import GraphMetrics

_T1 = ("exchange", "blueprint")
_T2 = ("exchange", "agent identity")


@dataclass(frozen=True)
class AgentUserIdentity:
    """Who the three hops act as, and the Entra authority they ask."""

    authority: str
    tenant_id: str
    blueprint_client_id: str
    agent_identity_id: str
    agent_user_id: str


class AgentUserTokenProvider:
    def __init__(
        self,
        identity: AgentUserIdentity,
        blueprint_credential: BlueprintCredential,
        *,
        http: httpx.AsyncClient,
        metrics: GraphMetrics,
        refresh_margin_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._blueprint_client_id = identity.blueprint_client_id
        self._credential = blueprint_credential
        self._agent_identity_id = identity.agent_identity_id
        self._agent_user_id = identity.agent_user_id
        self._clock = clock
        self._endpoint = TokenEndpoint(
            http,
            token_url(identity.authority, identity.tenant_id),
            metrics=metrics,
            clock=clock,
            sleep=sleep,
            rng=rng,
        )
        self._cache = SingleFlightTokenCache(refresh_margin_s=refresh_margin_s, clock=clock)

    def describe(self) -> str:
        return (
            f"agent user {self._agent_user_id} via agent identity {self._agent_identity_id} "
            f"(blueprint {self._blueprint_client_id}, {self._credential.describe()}) at {self._endpoint.url}"
        )

    async def get_token(self, scope: str) -> AccessToken:
        return await self._cache.get(("user", scope), lambda: self._user_token(scope))

    def agent_identity_tokens(self) -> TokenProvider:
        """The agent identity's app-only tokens (hop 2 for a resource), sharing T1 with the user tokens."""
        return _AgentIdentityTokens(self)

    async def get_app_token(self, scope: str) -> AccessToken:
        return await self._cache.get(("app", scope), lambda: self._agent_identity_hop(scope))

    def invalidate_app(self, scope: str, rejected: str | None = None) -> None:
        if self._cache.invalidate(("app", scope), rejected):
            self._cache.invalidate(_T1)

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        if self._cache.invalidate(("user", scope), rejected):
            # A refused user token (revoked sessions, a disabled user) says nothing good about the
            # exchange tokens it was derived from either; re-deriving them costs two requests.
            self._cache.invalidate(_T1)
            self._cache.invalidate(_T2)

    async def _t1(self) -> AccessToken:
        return await self._cache.get(_T1, self._blueprint_hop)

    async def _t2(self) -> AccessToken:
        return await self._cache.get(_T2, lambda: self._agent_identity_hop(EXCHANGE_SCOPE))

    async def _blueprint_hop(self) -> AccessToken:
        async def form() -> dict[str, str]:
            credential = await self._credential.assertion_fields(
                client_id=self._blueprint_client_id, token_url=self._endpoint.url, now=self._clock()
            )
            return blueprint_form(self._blueprint_client_id, self._agent_identity_id, credential)

        return await self._endpoint.exchange(1, form)

    async def _agent_identity_hop(self, scope: str) -> AccessToken:
        t1 = await self._t1()

        async def form() -> dict[str, str]:
            return agent_identity_form(self._agent_identity_id, scope, t1.token)

        try:
            return await self._endpoint.exchange(2, form)
        except TokenAcquisitionError:
            # Entra may have refused T1 itself (expired or revoked early): derive it afresh next time.
            self._cache.invalidate(_T1, t1.token)
            raise

    async def _user_token(self, scope: str) -> AccessToken:
        t1 = await self._t1()
        t2 = await self._t2()

        async def form() -> dict[str, str]:
            return user_fic_form(
                self._agent_identity_id, self._agent_user_id, scope, t1.token, t2.token
            )

        try:
            return await self._endpoint.exchange(3, form)
        except TokenAcquisitionError:
            self._cache.invalidate(_T1, t1.token)
            self._cache.invalidate(_T2, t2.token)
            raise


class _AgentIdentityTokens:
    """``TokenProvider`` over the agent identity's app-only tokens of one ``AgentUserTokenProvider``."""

    def __init__(self, provider: AgentUserTokenProvider) -> None:
        self._provider = provider

    async def get_token(self, scope: str) -> AccessToken:
        return await self._provider.get_app_token(scope)

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        self._provider.invalidate_app(scope, rejected)
