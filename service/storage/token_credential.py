"""An AsyncTokenCredential over a plain ``async () -> (token, expires_on)`` provider.

The agent-user storage token comes from our own three-hop flow, not from azure-identity, so this
adapter lets the Blob SDK's bearer policy ask it for tokens. The provider is already bound to the
storage scope and keeps its own cache; azure-core additionally reuses a token until shortly before
``expires_on``, so the provider is called about once per token lifetime, not once per request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from azure.core.credentials import AccessToken

from service.storage.errors import StorageError, TokenExpiredError

TokenProvider = Callable[[], Awaitable[tuple[str, float]]]


class TokenProviderCredential:
    """Implements azure-core's AsyncTokenCredential protocol by calling ``provider``."""

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        # Scopes are ignored: the provider is bound to https://storage.azure.com/.default.
        try:
            token, expires_on = await self._provider()
        except StorageError:
            raise
        except Exception as exc:
            # Storage callers branch on StorageError types only; the provider's own error is kept
            # as the cause. Its message is not repeated: token flows may quote responses.
            raise TokenExpiredError(
                f"the storage token provider failed ({type(exc).__name__}); the agent-user storage "
                "token could not be refreshed"
            ) from exc
        return AccessToken(token, int(expires_on))

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> TokenProviderCredential:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()
