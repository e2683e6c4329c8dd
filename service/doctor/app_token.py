"""The agent identity's own app-only Graph token (hops 1 and 2, then client_credentials for Graph).

Graph's "List agentIdentity sponsors" page supports application permissions only (no delegated
permission is listed), so the sponsor read cannot use the agent user's token. The fleet's own
app-only provider (``AgentUserTokenProvider.agent_identity_tokens``) caches and shares hop 1 with the
user tokens; the doctor keeps this small uncached one so that each run asks Entra afresh and can name
the hop that failed.
"""

from __future__ import annotations

import time

import httpx

from service.graph.auth.credentials import BlueprintCredential
from service.graph.auth.hop_forms import agent_identity_form, blueprint_form
from service.graph.auth.token_endpoint import TokenEndpoint, token_url
from service.graph.auth.tokens import AccessToken
from service.telemetry.metrics import GraphMetrics


class AgentIdentityAppToken:
    """A TokenProvider for the agent identity itself: one fresh token per ``get_token`` call."""

    def __init__(
        self,
        authority: str,
        tenant_id: str,
        blueprint_client_id: str,
        credential: BlueprintCredential,
        agent_identity_id: str,
        *,
        http: httpx.AsyncClient,
    ) -> None:
        self._blueprint_client_id = blueprint_client_id
        self._credential = credential
        self._agent_identity_id = agent_identity_id
        self._endpoint = TokenEndpoint(
            http, token_url(authority, tenant_id), metrics=GraphMetrics(), clock=time.time
        )

    async def get_token(self, scope: str) -> AccessToken:
        async def hop1() -> dict[str, str]:
            fields = await self._credential.assertion_fields(
                client_id=self._blueprint_client_id, token_url=self._endpoint.url, now=time.time()
            )
            return blueprint_form(self._blueprint_client_id, self._agent_identity_id, fields)

        t1 = await self._endpoint.exchange(1, hop1)

        async def hop2() -> dict[str, str]:
            return agent_identity_form(self._agent_identity_id, scope, t1.token)

        return await self._endpoint.exchange(2, hop2)

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        return None  # nothing is cached
