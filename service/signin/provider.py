"""The signed-in person's tokens for every replica of a delegated-mode fleet.

Where the tokens live, and why there. One sealed record in the shared container (``store``) holds the
person's refresh token and the access tokens the fleet shares. The alternative, a Kubernetes Secret
mounted read-only, cannot take what a refresh hands back: Entra replaces the refresh token on every use,
so the record must be rewritten, and a pod would need the API-server rights to patch a Secret (and
would read its own write only after the kubelet's sync, up to a minute or more later). The container
already gives every replica strong reads and compare-and-swap writes, works the same in local runs
(Azurite, a data directory), and is where the rest of the fleet's state is. What the container lacks is
secrecy from whoever may read it, hence the seal (``sealing``), under a key kept in the replicas'
Secret.

Who refreshes. A token still fresh (more than ``refresh_margin_s`` left) is simply used, by any
replica. One that is due is refreshed by the holder of the ``signin_refresh`` lease only
(``service.ledger.fleet.leases``): it re-reads the record under the lease (a sibling may just have
refreshed), redeems the refresh token, writes the record back with If-Match on what it read, and
releases the lease. Meanwhile the other replicas keep using the token they have (it is only due, not
expired) and look again ``RECHECK_S`` later. Two replicas never redeem the refresh token for the same
refresh; if they did (a holder slower than its lease), nothing breaks: Entra does not revoke the old
refresh token on use (read, not run: "Refresh tokens in the Microsoft identity platform"), and the
If-Match write keeps one result. A write that fails leaves the old record, whose refresh token still
works. No token, refresh token or record content is ever logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from service.clock import Clock, utc_now
from service.graph.auth.cache import SingleFlightTokenCache
from service.graph.auth.tokens import AccessToken
from service.ledger.fleet.leases import Lease
from service.ledger.records.reads import ReadOutcome
from service.signin.errors import SIGN_IN_ADVICE, SignInRequired, SignInUnavailable
from service.signin.public_client import (
    EntraUnreachable,
    PublicClient,
    SignInRefused,
    sign_in_scope,
)
from service.signin.record import CachedToken, SignInRecord
from service.signin.store import SignInStore, Unreadable
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import RoleMetrics

log = logging.getLogger(__name__)

ROLE = "signin_refresh"
# A refresh is one request to Entra (retried within TokenEndpoint's bounds): a minute covers it.
LEASE_TTL = timedelta(seconds=60)
LEASE_MARGIN = timedelta(seconds=10)
REFRESH_MARGIN_S = 300.0
RECHECK_S = 5.0  # while another replica refreshes, look at the record again this soon
MIN_USABLE_S = (
    30.0  # a token with less than this left is not handed out while waiting for a refresh
)
WAIT_FOR_REFRESH_S = 20.0
WAIT_POLL_S = 0.5
# A refused refresh token is not redeemed again by this replica for this long (unless a new sign-in
# replaced it): every Graph call would otherwise ask Entra once more for the same verdict.
REFUSED_PAUSE_S = 60.0


def refresh_lease(
    backend: MemoryBackend,
    replica_id: str,
    *,
    metrics: RoleMetrics,
    clock: Clock = utc_now,
) -> Lease:
    return Lease(
        backend,
        ROLE,
        replica_id,
        ttl=LEASE_TTL,
        margin=LEASE_MARGIN,
        clock=clock,
        metrics=metrics,
    )


@dataclass(frozen=True)
class ProviderTime:
    """What the provider reads the time from and waits with (a test moves the clocks)."""

    clock: Callable[[], float] = time.time  # seconds since the epoch: a token's lifetime
    now: Clock = utc_now  # the record's timestamps
    monotonic: Callable[[], float] = time.monotonic  # how long a wait for a sibling's refresh lasts
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


class DelegatedTokenProvider:
    """A ``TokenProvider`` over the shared sign-in record (module docstring). It acts for the person it
    first read: a record naming someone else later (a sign-in with ``--replace``) refuses every token
    until the replica restarts, since its agent identity, sponsor and sent messages are that person's."""

    def __init__(
        self,
        store: SignInStore,
        client: PublicClient,
        lease: Lease,
        *,
        replica_id: str,
        tenant_id: str,
        refresh_margin_s: float = REFRESH_MARGIN_S,
        timing: ProviderTime = ProviderTime(),
    ) -> None:
        self._store = store
        self._client = client
        self._lease = lease
        self._replica_id = replica_id
        self._tenant_id = tenant_id
        self._margin = refresh_margin_s
        self._clock = timing.clock
        self._now = timing.now
        self._monotonic = timing.monotonic
        self._sleep = timing.sleep
        self._cache = SingleFlightTokenCache(refresh_margin_s=refresh_margin_s, clock=timing.clock)
        self._rejected: dict[
            str, str
        ] = {}  # per scope, the token Graph refused (kept in memory only)
        self._person: str | None = None
        self._refused: tuple[str, float, str] | None = None  # (refresh token, until, message)

    def describe(self) -> str:
        return (
            f"the signed-in person's tokens for app {self._client.client_id}, from the sealed record "
            f"{self._store.record_key}, refreshed by the {ROLE} lease holder at {self._client.token_url}"
        )

    async def get_token(self, scope: str) -> AccessToken:
        return await self._cache.get_until(scope, lambda: self._obtain(scope))

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        if self._cache.invalidate(scope, rejected) and rejected is not None:
            self._rejected[scope] = (
                rejected  # the record may still hold it: refresh rather than reuse it
            )

    # --- the protocol ---

    async def _obtain(self, scope: str) -> tuple[AccessToken, float]:
        record, _ = await self._read()
        token = self._usable(record, scope)
        if token is not None:
            return self._timed(token)
        return await self._refresh_or_wait(scope, record)

    async def _refresh_or_wait(self, scope: str, record: SignInRecord) -> tuple[AccessToken, float]:
        deadline = self._monotonic() + WAIT_FOR_REFRESH_S
        while True:
            await self._lease.acquire_or_renew()
            if self._lease.held():
                try:
                    return await self._refresh(scope)
                finally:
                    await self._lease.release()  # the next refresh may be anyone's at once
            current = record.access_tokens.get(scope)
            if (
                current is not None
                and current.token != self._rejected.get(scope)
                and current.expires_on - self._clock() > MIN_USABLE_S
            ):
                return AccessToken(current.token, current.expires_on), self._clock() + RECHECK_S
            if self._monotonic() >= deadline:
                holder = (
                    self._lease.last_known.holder
                    if self._lease.last_known is not None
                    else "another replica"
                )
                raise SignInUnavailable(
                    f"the signed-in person's token is being refreshed by {holder} and was not "
                    f"ready within {WAIT_FOR_REFRESH_S:.0f} s; the next call tries again"
                )
            await self._sleep(WAIT_POLL_S)
            record, _ = await self._read()
            token = self._usable(record, scope)
            if token is not None:
                return self._timed(token)

    async def _refresh(self, scope: str) -> tuple[AccessToken, float]:
        record, etag = await self._read()  # under the lease: a sibling's refresh just before counts
        token = self._usable(record, scope)
        if token is not None:
            return self._timed(token)
        self._raise_if_refused(record)
        try:
            grant = await self._client.redeem_refresh_token(
                record.refresh_token, sign_in_scope(scope)
            )
        except SignInRefused as exc:
            message = (
                f"Entra refused the refresh token of {record.person.describe()} ({exc.code or exc.error}); "
                f"{SIGN_IN_ADVICE} to sign in again"
            )
            self._refused = (record.refresh_token, self._monotonic() + REFUSED_PAUSE_S, message)
            log.warning(
                "the signed-in person's refresh token was refused; sign in again",
                extra={"code": exc.code, "error": exc.error},
            )
            raise SignInRequired(message, code=exc.code) from None
        except EntraUnreachable as exc:
            raise SignInUnavailable(str(exc)) from None
        fresh = grant.cached()
        updated = record.refreshed(
            scope, fresh, grant.refresh_token, at=self._now(), by=self._replica_id
        )
        try:
            await self._store.write(updated, etag=etag)
            log.info(
                "the signed-in person's token was refreshed for the fleet",
                extra={"generation": updated.generation, "refreshes": updated.refreshes},
            )
        except ConcurrencyError:
            await (
                self._read()
            )  # another writer came first: fine while it is the same person (else this raises)
            log.info("the sign-in record changed during a refresh; the stored one stands")
        except StorageError as exc:
            # The old record, with a refresh token Entra still honours, stays for the others.
            log.warning(
                "a refreshed token could not be written; this replica uses it, the others refresh again",
                extra={"error": type(exc).__name__},
            )
        self._rejected.pop(scope, None)
        return self._timed(fresh)

    # --- reading the record ---

    async def _read(self) -> tuple[SignInRecord, str | None]:
        stored = await self._store.read()
        if stored.outcome is ReadOutcome.ABSENT:
            raise SignInRequired(
                f"nobody has signed in for delegated mode ({self._store.record_key} is absent); "
                f"{SIGN_IN_ADVICE}"
            )
        if stored.record is None:
            if stored.unreadable is Unreadable.WRONG_KEY:
                raise SignInRequired(
                    f"the sign-in record is sealed under another key ({stored.detail}): set "
                    "ENTRABOT_DELEGATED_TOKEN_KEY to the key `entrabot-fleet signin` used, or "
                    f"{SIGN_IN_ADVICE} with this key"
                )
            if stored.unreadable is Unreadable.CORRUPT:
                raise SignInRequired(
                    f"the sign-in record does not open ({stored.detail}); {SIGN_IN_ADVICE}"
                )
            raise SignInUnavailable(
                f"the sign-in record cannot be read now ({stored.detail}); the next call "
                "tries again"
            )
        record = stored.record
        if record.client_id != self._client.client_id or record.tenant_id != self._tenant_id:
            raise SignInRequired(
                f"the sign-in record is for app {record.client_id} of tenant {record.tenant_id}, "
                f"not ENTRABOT_DELEGATED_CLIENT_ID={self._client.client_id} of "
                f"ENTRABOT_TENANT_ID={self._tenant_id}; {SIGN_IN_ADVICE}"
            )
        if self._person is None:
            self._person = record.person.object_id
        elif record.person.object_id != self._person:
            raise SignInRequired(
                f"the container's sign-in now belongs to {record.person.describe()}, and this "
                "replica acts for the person signed in when it started: restart the replicas"
            )
        return record, stored.etag

    def _usable(self, record: SignInRecord, scope: str) -> CachedToken | None:
        token = record.fresh_token(scope, now=self._clock(), margin_s=self._margin)
        return None if token is None or token.token == self._rejected.get(scope) else token

    def _timed(self, token: CachedToken) -> tuple[AccessToken, float]:
        return AccessToken(token.token, token.expires_on), token.use_until(self._margin)

    def _raise_if_refused(self, record: SignInRecord) -> None:
        if self._refused is None:
            return
        refused_token, until, message = self._refused
        if refused_token == record.refresh_token and self._monotonic() < until:
            raise SignInRequired(message)
        self._refused = None
