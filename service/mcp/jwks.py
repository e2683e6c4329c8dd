"""The tenant's signing keys for /mcp tokens, fetched without blocking the event loop.

A key is trusted only while the key set it came from is fresh. The set is refetched on use once it
is ``refresh_after_s`` old, and keys from a set older than ``max_age_s`` are not trusted at all, so a
key Entra withdraws stops verifying tokens within ``max_age_s`` (an hour by default) even while
every refetch fails — fail closed, as a stale key set may hold a compromised key. The margin between
the two lets a failed refetch be retried before trust runs out. Refreshing on use rather than from a
background loop keeps the guarantee without a loop: a set nobody asks for is never trusted stale.

A token naming a key id not in the set triggers a refetch too (Entra publishes a new key before it
signs with it), at most once per ``min_refresh_interval_s`` so a stream of forged key ids cannot turn
every request into a fetch. Concurrent lookups share one fetch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx
import jwt

log = logging.getLogger(__name__)

DEFAULT_JWKS_MIN_REFRESH_S = 60.0
DEFAULT_JWKS_REFRESH_AFTER_S = 30 * 60.0
DEFAULT_JWKS_MAX_AGE_S = 60 * 60.0


class JwksCache:
    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        min_refresh_interval_s: float = DEFAULT_JWKS_MIN_REFRESH_S,
        refresh_after_s: float = DEFAULT_JWKS_REFRESH_AFTER_S,
        max_age_s: float = DEFAULT_JWKS_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < refresh_after_s < max_age_s:
            raise ValueError("refresh_after_s must be positive and below max_age_s")
        self._url = url
        self._http = http
        self._min_refresh_interval_s = min_refresh_interval_s
        self._refresh_after_s = refresh_after_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at: float | None = None  # when the current set was fetched
        self._attempted_at: float | None = (
            None  # the last fetch, failed or not (for the rate limit)
        )
        self._lock = asyncio.Lock()

    async def key(self, kid: str) -> jwt.PyJWK | None:
        age = self._age()
        if age is None or age >= self._refresh_after_s:
            await self._refresh()
        key = self._trusted().get(kid)
        if key is None:
            await self._refresh()
            key = self._trusted().get(kid)
        return key

    def _age(self) -> float | None:
        return None if self._loaded_at is None else self._clock() - self._loaded_at

    def _trusted(self) -> dict[str, jwt.PyJWK]:
        age = self._age()
        if age is None or age >= self._max_age_s:
            return {}
        return self._keys

    async def _refresh(self) -> None:
        async with self._lock:
            now = self._clock()
            if (
                self._attempted_at is not None
                and now - self._attempted_at < self._min_refresh_interval_s
            ):
                return
            self._attempted_at = now  # a failed fetch is rate-limited too
            try:
                response = await self._http.get(self._url)
                response.raise_for_status()
                document = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning(
                    "could not fetch the tenant's signing keys",
                    extra={"error_type": type(exc).__name__},
                )
                return
            keys: dict[str, jwt.PyJWK] = {}
            for entry in document.get("keys", []) if isinstance(document, dict) else []:
                try:
                    key = jwt.PyJWK(entry)
                except (jwt.PyJWTError, TypeError, ValueError):
                    continue  # a key type or algorithm this service does not use
                if key.key_id:
                    keys[key.key_id] = key
            # The whole set is replaced: a key Entra no longer publishes is gone at once.
            self._keys, self._loaded_at = keys, now
