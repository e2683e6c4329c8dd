"""The MemoryBackend protocol: where the fleet's shared operational state lives.

Every method is a coroutine so that no storage call can block the event loop (the single-host
system's sync shim once starved the MCP handshake past the host's timeout). Keys are forward-slash
paths such as ``interactions/2026-04-17.jsonl``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from service.storage.errors import (
    BackendMisconfiguredError,
    BackendUnavailableError,
    ConcurrencyError,
    StorageError,
    TokenExpiredError,
    TransientStorageError,
)

__all__ = [
    "MemoryBackend",
    "StorageError",
    "ConcurrencyError",
    "TokenExpiredError",
    "BackendMisconfiguredError",
    "TransientStorageError",
    "BackendUnavailableError",
]


@runtime_checkable
class MemoryBackend(Protocol):
    """Shared key/value text storage with ETag compare-and-swap and atomic appends."""

    async def read_text(self, key: str) -> str | None:
        """The content, or None when the key is absent."""

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        """(content, etag), or (None, None) when the key is absent. ETags are opaque strings."""

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        """Write and return the new ETag.

        ``if_match``: succeed only if the current ETag equals it, else ConcurrencyError.
        ``if_absent``: create only if missing, else ConcurrencyError.
        Neither: unconditional overwrite.
        """

    async def append_text(self, key: str, content: str) -> None:
        """Atomically append; concurrent appenders from several replicas never lose a line."""

    async def exists(self, key: str) -> bool: ...

    async def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (all pages), sorted."""

    async def check(self) -> None:
        """Raise a StorageError when the store is unreachable or misconfigured (readiness)."""

    def describe(self) -> str:
        """One line naming where the state lives, for start-up logs. Never includes a secret."""

    async def aclose(self) -> None:
        """Release network clients."""
