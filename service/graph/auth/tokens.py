"""Access tokens and what hands them out: the provider protocol, a fixed-token provider, scopes.

Everything that needs a bearer token (the Graph client, the Blob backend) depends on the
``TokenProvider`` protocol, never on how the token was obtained.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

GRAPH_SCOPE = "https://graph.microsoft.com/.default"
STORAGE_SCOPE = "https://storage.azure.com/.default"


@dataclass(frozen=True)
class AccessToken:
    token: str = field(repr=False)
    expires_on: float  # seconds since the epoch


@runtime_checkable
class TokenProvider(Protocol):
    async def get_token(self, scope: str) -> AccessToken:
        """A token for ``scope`` that is valid for a while yet (cached; refreshed before expiry)."""

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        """Forget the cached token for ``scope`` because a server refused it.

        With ``rejected``, only that token is forgotten: when several requests fail with the same
        stale token at once, the first invalidation triggers one refresh and the later ones leave
        the fresh token alone.
        """


class StaticTokenProvider:
    """One fixed token for every scope: for local runs against the emulator and for tests."""

    def __init__(self, token: str, *, expires_on: float = math.inf) -> None:
        self._token = AccessToken(token, expires_on)

    async def get_token(self, scope: str) -> AccessToken:
        return self._token

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        # A fixed token cannot be refreshed; the caller's single retry fails and reports the 401.
        return None


def storage_token_provider(provider: TokenProvider) -> Callable[[], Awaitable[tuple[str, float]]]:
    """The agent user's Blob token as the BlobBackend expects it: () -> (access_token, expires_on)."""

    async def storage_token() -> tuple[str, float]:
        token = await provider.get_token(STORAGE_SCOPE)
        return token.token, token.expires_on

    return storage_token
