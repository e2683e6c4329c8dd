"""A token cache with single-flight refresh: however many callers ask at once, one request is made.

Waiters share the refreshing task (not a lock): when the refresh fails, every waiter gets that one
failure, instead of each retrying in turn against a token endpoint that just refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from service.graph.auth.tokens import AccessToken


@dataclass(frozen=True)
class _Entry:
    token: AccessToken
    refresh_at: float


class SingleFlightTokenCache:
    def __init__(self, *, refresh_margin_s: float, clock: Callable[[], float]) -> None:
        self._margin = refresh_margin_s
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}
        self._inflight: dict[Hashable, asyncio.Task[AccessToken]] = {}

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[AccessToken]]) -> AccessToken:
        """The cached token for ``key`` while it is fresh, else the result of one shared ``fetch``."""

        async def timed() -> tuple[AccessToken, float]:
            started = self._clock()
            token = await fetch()
            # Refresh ``margin`` before expiry, but never later than half-way through a token's
            # life: a token shorter-lived than the margin would otherwise be refetched on every call.
            lifetime = max(0.0, token.expires_on - started)
            return token, token.expires_on - min(self._margin, lifetime / 2)

        return await self.get_until(key, timed)

    async def get_until(
        self, key: Hashable, fetch: Callable[[], Awaitable[tuple[AccessToken, float]]]
    ) -> AccessToken:
        """As ``get``, for a ``fetch`` that says itself until when its token may be used without asking again."""
        entry = self._entries.get(key)
        if entry is not None and self._clock() < entry.refresh_at:
            return entry.token
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._refresh(key, fetch))
            # Retrieve the outcome even if every waiter was cancelled, so a failure is never
            # reported as "exception was never retrieved".
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        # A cancelled waiter must not cancel the refresh the other waiters share.
        return await asyncio.shield(task)

    def invalidate(self, key: Hashable, rejected: str | None = None) -> bool:
        """Forget ``key``'s token (only if it is ``rejected``, when given); True if one was dropped."""
        entry = self._entries.get(key)
        if entry is None or (rejected is not None and entry.token.token != rejected):
            return False
        del self._entries[key]
        return True

    async def _refresh(
        self, key: Hashable, fetch: Callable[[], Awaitable[tuple[AccessToken, float]]]
    ) -> AccessToken:
        try:
            token, refresh_at = await fetch()
            self._entries[key] = _Entry(token, refresh_at)
            return token
        finally:
            self._inflight.pop(key, None)
