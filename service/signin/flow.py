"""One sign-in, by device code: show the code, wait (bounded) for the person, learn who they are, and store
their tokens, sealed, for the whole fleet.

The wait polls no faster than Entra's ``interval`` (5 s longer after a ``slow_down``) and ends at the
code's ``expires_in`` or the caller's timeout, whichever comes first. The record is written with
compare-and-swap: created where there is none, else replacing the one read (a replica's refresh landing
in between is simply read again). Signing in as someone other than the person the container already
holds changes whose chats and mail the fleet reads, so it takes ``replace``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from service.clock import Clock, utc_now
from service.graph.auth.tokens import GRAPH_SCOPE, StaticTokenProvider
from service.graph.client import GraphClient
from service.graph.options import GraphOptions
from service.telemetry.metrics import GraphMetrics
from service.ledger.records.reads import ReadOutcome
from service.signin.public_client import (
    DeviceCode,
    Pending,
    PublicClient,
    TokenGrant,
    sign_in_scope,
)
from service.signin.record import SignedInPerson, SignInRecord
from service.signin.store import SignInStore
from service.storage.errors import ConcurrencyError

SLOW_DOWN_STEP_S = 5.0  # RFC 8628 §3.5
WRITE_ATTEMPTS = 5
SIGNED_IN_BY = "signin"


class SignInEnded(Exception):
    """The sign-in did not happen (declined, expired, timed out) or cannot be stored; the message says why."""


@dataclass(frozen=True)
class Stored:
    record: SignInRecord
    replaced: SignedInPerson | None  # the person signed in before, when it was someone else


@dataclass
class SignInFlow:
    client: PublicClient
    store: SignInStore
    http: httpx.AsyncClient
    graph_url: str
    tenant_id: str
    scope: str = GRAPH_SCOPE
    now: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def start(self) -> DeviceCode:
        return await self.client.start_device_code(sign_in_scope(self.scope))

    async def wait(
        self,
        code: DeviceCode,
        *,
        timeout_s: float,
        on_wait: Callable[[float], None] = lambda remaining: None,
    ) -> TokenGrant:
        """The person's tokens once they signed in; SignInEnded when the code or ``timeout_s`` runs out.
        ``on_wait`` hears the seconds left before each poll (the caller's progress display)."""
        deadline = self.monotonic() + min(code.expires_in_s, timeout_s)
        interval = max(1.0, code.interval_s)
        while True:
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                raise SignInEnded(
                    f"nobody signed in with the code {code.user_code} within "
                    f"{min(code.expires_in_s, timeout_s):.0f} s; run the command again for a new code"
                )
            on_wait(remaining)
            await self.sleep(min(interval, remaining))
            polled = await self.client.poll_device_code(code)
            if isinstance(polled, TokenGrant):
                return polled
            if polled is Pending.SLOW_DOWN:
                interval += SLOW_DOWN_STEP_S

    async def who(self, grant: TokenGrant) -> SignedInPerson:
        """GET /me with the new token: who signed in, as Graph sees them (and proof the token works there)."""
        graph = GraphClient(
            GraphOptions(self.graph_url),
            StaticTokenProvider(grant.access_token, expires_on=grant.expires_on),
            http=self.http,
            metrics=GraphMetrics(),
        )
        me = await graph.directory.get_me()
        return SignedInPerson(me.id, me.user_principal_name, me.display_name)

    async def save(self, grant: TokenGrant, person: SignedInPerson, *, replace: bool) -> Stored:
        if grant.refresh_token is None:
            raise SignInEnded(
                "Entra signed the person in but sent no refresh token, so the fleet could not keep "
                "the sign-in past the first hour; check that the app registration allows public "
                "client flows and that offline_access is not blocked"
            )
        for _ in range(WRITE_ATTEMPTS):
            stored = await self.store.read()
            before = stored.record
            if stored.outcome is ReadOutcome.UNRESOLVED and stored.etag is None:
                raise SignInEnded(
                    f"the sign-in record cannot be read now ({stored.detail}); run the command "
                    "again. Nothing written"
                )
            if stored.outcome is ReadOutcome.UNRESOLVED and not replace:
                raise SignInEnded(
                    f"the sign-in already in the container cannot be opened ({stored.detail}); pass "
                    "--replace to overwrite it with this one. Nothing written"
                )
            if before is not None and before.person.object_id != person.object_id and not replace:
                raise SignInEnded(
                    f"the container holds the sign-in of {before.person.describe()}; signing in "
                    f"as {person.describe()} changes whose chats and mail the fleet reads. Pass "
                    "--replace to do it (then restart the replicas). Nothing written"
                )
            now = self.now()
            record = SignInRecord(
                tenant_id=self.tenant_id,
                client_id=self.client.client_id,
                person=person,
                refresh_token=grant.refresh_token,
                scope=sign_in_scope(self.scope),
                signed_in_at=now,
                refreshed_at=now,
                refreshed_by=SIGNED_IN_BY,
                generation=(before.generation + 1) if before is not None else 1,
                access_tokens={self.scope: grant.cached()},
            )
            try:
                await self.store.write(record, etag=stored.etag)
            except ConcurrencyError:
                continue  # a replica's refresh (or another sign-in) landed first: read it, replace it
            replaced = (
                before.person
                if before is not None and before.person.object_id != person.object_id
                else None
            )
            return Stored(record, replaced)
        raise SignInEnded(
            f"the sign-in record kept changing while it was written ({WRITE_ATTEMPTS} attempts); "
            "run the command again"
        )
