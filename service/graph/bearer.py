"""The agent user's bearer token on each Graph request, refreshed once when Graph refuses it.

An ``httpx.Auth`` flow: httpx drives it, sends what it yields and hands back each answer, so the refresh
and its resend happen inside one send of the transport. A 401 means the token was refused (revoked
early, say, by continuous access evaluation): the token is invalidated, a fresh one fetched and the
request sent once more. Once per call, not per send: a call that refreshed and then retried after a 5xx
does not refresh again, and a second 401 comes back to the caller as an auth error.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator

import httpx

from service.graph.auth.tokens import TokenProvider


class BearerAuth(httpx.Auth):
    """One call's token flow (build one per call: it remembers that the call refreshed)."""

    def __init__(self, tokens: TokenProvider, scope: str) -> None:
        self._tokens = tokens
        self._scope = scope
        self.refreshed = False

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("the Graph client is async only; its token provider awaits")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        # ``async_auth_flow`` rather than httpx's plain ``auth_flow`` generator: fetching a token
        # awaits the provider (Entra's three hops, single-flight), which a sync generator cannot.
        token = (await self._tokens.get_token(self._scope)).token
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401 or self.refreshed:
            return
        self._tokens.invalidate(self._scope, token)
        self.refreshed = True
        fresh = (await self._tokens.get_token(self._scope)).token
        # A new request rather than the sent one changed in place: the refused one, kept in the
        # answer's history, still shows the token Graph refused.
        resend = httpx.Request(
            request.method,
            request.url,
            headers=request.headers.copy(),
            content=request.content,
            extensions=request.extensions,
        )
        resend.headers["Authorization"] = f"Bearer {fresh}"
        yield resend
