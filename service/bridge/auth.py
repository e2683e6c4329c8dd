"""The bearer token on every request to the fleet: a static one, or an Entra token refreshed before expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

import httpx2

from service.bridge.config import CredentialSource, EntraTokenSource, StaticTokenSource

REFRESH_MARGIN_S = 300.0
"""An Entra token is replaced this long before it expires, so no request carries one about to lapse."""


class TokenProvider(Protocol):
    async def token(self) -> str: ...
    async def aclose(self) -> None: ...


class StaticToken:
    def __init__(self, value: str) -> None:
        self._value = value

    async def token(self) -> str:
        return self._value

    async def aclose(self) -> None:
        return None


class AsyncTokenCredential(Protocol):
    """What azure-identity's async credentials offer (``azure.core.credentials_async.AsyncTokenCredential``)."""

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any: ...
    async def close(self) -> None: ...


class EntraToken:
    """A token for the fleet's audience from an azure-identity credential, cached until near expiry."""

    def __init__(
        self,
        credential: AsyncTokenCredential,
        scope: str,
        *,
        refresh_margin_s: float = REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credential = credential
        self._scope = scope
        self._margin = refresh_margin_s
        self._clock = clock
        self._cached: tuple[str, float] | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        async with self._lock:
            if self._cached is None or self._cached[1] - self._clock() <= self._margin:
                access = await self._credential.get_token(self._scope)
                self._cached = (access.token, float(access.expires_on))
            return self._cached[0]

    async def aclose(self) -> None:
        await self._credential.close()


def build_token_provider(source: CredentialSource) -> TokenProvider:
    if isinstance(source, StaticTokenSource):
        return StaticToken(source.token)
    assert isinstance(source, EntraTokenSource)
    # DefaultAzureCredential tries, in order, environment, workload identity, managed identity, then the
    # developer sign-ins (az login among them): azure-identity's docs, "DefaultAzureCredential". Only the
    # az login path can be exercised here; the others need an Azure host.
    from azure.identity.aio import DefaultAzureCredential

    return EntraToken(
        DefaultAzureCredential(exclude_interactive_browser_credential=True), source.scope
    )


class TokenUnavailable(httpx2.RequestError):
    """No token could be acquired; raised as a request error so it fails the request like a network fault."""


class BearerAuth(httpx2.Auth):
    """httpx's auth hook: the current token goes on each request as it is sent, never stored elsewhere."""

    def __init__(self, tokens: TokenProvider) -> None:
        self._tokens = tokens

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        try:
            token = await self._tokens.token()
        except Exception as exc:  # noqa: BLE001 - azure-identity raises several types; all mean "no token"
            first_line = (str(exc).splitlines() or [""])[0][:200]
            raise TokenUnavailable(
                f"no Entra token for the fleet ({type(exc).__name__}: {first_line}); "
                "run az login, or configure a workload or managed identity",
                request=request,
            ) from None
        request.headers["Authorization"] = f"Bearer {token}"
        yield request
