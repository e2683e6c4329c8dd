"""The signed-in person's token across a fleet: replicas share the sealed record in one Azurite container
and refresh it through the emulator's token endpoint over HTTP, one lease holder at a time.

Each "replica" here is a DelegatedTokenProvider with its own replica id and lease, as each replica
process builds one; they race through the real container (ETags, If-Match) and the real refresh-token
grant. The replicas' epoch clock is a test clock, so a token is made due or expired by moving it, not
by waiting an hour; the lease's clock too, for the holder that dies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from sign_in_kit import delegated_settings, new_token_key, sign_in_as

from emulator.server import RunningEmulator
from service.config import Settings
from service.from_settings.signin import public_client, sign_in_store
from service.graph.auth.tokens import GRAPH_SCOPE
from service.ledger.fleet.leases import Lease
from service.signin.errors import SignInRequired
from service.signin.provider import (
    LEASE_MARGIN,
    LEASE_TTL,
    RECHECK_S,
    ROLE,
    DelegatedTokenProvider,
    ProviderTime,
)
from service.signin.sealing import SealingKey
from service.signin.store import SignInStore
from service.storage.blob import BlobBackend
from service.telemetry.metrics import GraphMetrics, RoleMetrics

pytestmark = [pytest.mark.azurite]

LIFETIME_S = 3600  # the emulator's token lifetime; the replicas refresh 300 s before its end


@dataclass
class Epoch:
    """The replicas' wall clock (seconds since the epoch), moved by the test."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class LeaseClock:
    offset: timedelta = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.offset


@dataclass
class Fleet:
    emulator: RunningEmulator
    settings: Settings
    backend: BlobBackend
    http: httpx.AsyncClient
    epoch: Epoch = field(default_factory=Epoch)
    lease_clock: LeaseClock = field(default_factory=LeaseClock)
    metrics: GraphMetrics = field(default_factory=GraphMetrics)
    refreshed_before: int = (
        0  # the emulator serves the whole module: count this test's refreshes only
    )

    def replica(self, name: str, *, settings: Settings | None = None) -> DelegatedTokenProvider:
        settings = settings or self.settings
        client = public_client(settings, self.http, metrics=self.metrics, clock=self.epoch)
        lease = Lease(
            self.backend,
            ROLE,
            name,
            ttl=LEASE_TTL,
            margin=LEASE_MARGIN,
            clock=self.lease_clock,
            metrics=RoleMetrics(),
        )
        return DelegatedTokenProvider(
            sign_in_store(settings, self.backend),
            client,
            lease,
            replica_id=name,
            tenant_id=settings.tenant_id or "",
            timing=ProviderTime(clock=self.epoch),
        )

    async def refreshes(self) -> int:
        redeemed = (await self.http.get(f"{self.emulator.admin_url}/refresh_tokens")).json()[
            "redeemed"
        ]
        return int(redeemed) - self.refreshed_before

    def refused(self) -> float:
        return self.metrics.token_requests.labels(
            hop="signed_in_person", outcome="rejected"
        )._value.get()

    async def sign_in(self, person: str) -> None:
        await sign_in_as(self.emulator, self.settings, self.backend, person)


@pytest.fixture
async def fleet(emulator: RunningEmulator, blob_backend: BlobBackend) -> AsyncIterator[Fleet]:
    async with httpx.AsyncClient(timeout=30) as http:
        started = Fleet(emulator, delegated_settings(emulator, new_token_key()), blob_backend, http)
        started.refreshed_before = await started.refreshes()
        yield started


async def tokens(replicas: list[DelegatedTokenProvider]) -> list[str]:
    return [t.token for t in await asyncio.gather(*(r.get_token(GRAPH_SCOPE) for r in replicas))]


async def test_every_replica_uses_the_token_the_sign_in_stored_without_asking_entra(
    fleet: Fleet,
) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    replicas = [fleet.replica(f"replica-{i}") for i in range(3)]
    record = (await sign_in_store(fleet.settings, fleet.backend).read()).record
    assert record is not None
    assert await tokens(replicas) == [record.access_tokens[GRAPH_SCOPE].token] * 3
    assert await fleet.refreshes() == 0
    assert record.person.object_id == fleet.emulator.seed.humans[0].id


async def test_a_due_token_is_refreshed_once_for_the_whole_fleet(fleet: Fleet) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    replicas = [fleet.replica(f"replica-{i}") for i in range(4)]
    before = await tokens(replicas)
    store = sign_in_store(fleet.settings, fleet.backend)
    first = (await store.read()).record
    fleet.epoch.offset = LIFETIME_S - 200  # due (300 s margin), still valid for 200 s
    during = await tokens(replicas)
    assert await fleet.refreshes() == 1
    after = (await store.read()).record
    assert first is not None and after is not None
    assert (
        after.refreshes == 1
        and after.refreshed_by.startswith("replica-")
        and after.refresh_token != first.refresh_token
    )
    new = after.access_tokens[GRAPH_SCOPE].token
    # The holder hands out the new token; the others kept the old one, still valid, and look again soon.
    assert new in during and set(during) <= {new, before[0]}
    fleet.epoch.offset += RECHECK_S + 1
    assert await tokens(replicas) == [new] * 4
    assert await fleet.refreshes() == 1


async def test_an_expired_token_is_refreshed_once_while_the_others_wait_for_it(
    fleet: Fleet,
) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    replicas = [fleet.replica(f"replica-{i}") for i in range(4)]
    fleet.epoch.offset = LIFETIME_S + 60
    got = await tokens(replicas)
    assert len(set(got)) == 1 and await fleet.refreshes() == 1


async def test_a_refused_refresh_token_asks_for_a_sign_in_and_is_not_redeemed_again_at_once(
    fleet: Fleet,
) -> None:
    ada = fleet.emulator.seed.humans[0]
    await fleet.sign_in(ada.user_principal_name)
    replica = fleet.replica("replica-1")
    await fleet.http.post(
        f"{fleet.emulator.admin_url}/revoke", json={"user": ada.user_principal_name}
    )
    fleet.epoch.offset = LIFETIME_S - 200
    for _ in range(3):
        with pytest.raises(SignInRequired, match="entrabot-fleet signin"):
            await replica.get_token(GRAPH_SCOPE)
    assert fleet.refused() == 1
    await fleet.sign_in(ada.user_principal_name)  # a new sign-in replaces the refused refresh token
    assert (await replica.get_token(GRAPH_SCOPE)).token


async def test_a_token_graph_refused_is_not_handed_out_again(fleet: Fleet) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    replica = fleet.replica("replica-1")
    refused = (await replica.get_token(GRAPH_SCOPE)).token
    replica.invalidate(GRAPH_SCOPE, refused)  # what the Graph client does on a 401
    assert (await replica.get_token(GRAPH_SCOPE)).token != refused
    assert await fleet.refreshes() == 1


async def test_a_holder_that_dies_mid_refresh_is_taken_over_once_its_lease_expires(
    fleet: Fleet,
) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    dead = Lease(
        fleet.backend,
        ROLE,
        "replica-dead",
        ttl=LEASE_TTL,
        margin=LEASE_MARGIN,
        clock=fleet.lease_clock,
        metrics=RoleMetrics(),
    )
    await dead.acquire_or_renew()
    assert dead.held()  # it took the role to refresh, and never came back
    live = fleet.replica("replica-live")
    fleet.epoch.offset = LIFETIME_S - 200
    old = (await live.get_token(GRAPH_SCOPE)).token
    assert await fleet.refreshes() == 0  # not its turn: the old token still works
    fleet.lease_clock.offset = LEASE_TTL + timedelta(seconds=1)
    fleet.epoch.offset += RECHECK_S + 1
    assert (await live.get_token(GRAPH_SCOPE)).token != old
    assert await fleet.refreshes() == 1


async def test_without_a_sign_in_a_replica_is_told_to_run_signin(fleet: Fleet) -> None:
    with pytest.raises(SignInRequired, match="nobody has signed in.*entrabot-fleet signin"):
        await fleet.replica("replica-1").get_token(GRAPH_SCOPE)


async def test_a_record_sealed_under_another_key_names_the_key_setting(fleet: Fleet) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    other = delegated_settings(fleet.emulator, new_token_key())
    with pytest.raises(SignInRequired, match="ENTRABOT_DELEGATED_TOKEN_KEY"):
        await fleet.replica("replica-1", settings=other).get_token(GRAPH_SCOPE)


async def test_a_running_replica_refuses_tokens_once_someone_else_signs_in(fleet: Fleet) -> None:
    seed = fleet.emulator.seed
    await fleet.sign_in(seed.humans[0].user_principal_name)
    replica = fleet.replica("replica-1")
    await replica.get_token(GRAPH_SCOPE)
    await fleet.sign_in(seed.humans[1].user_principal_name)
    fleet.epoch.offset = LIFETIME_S  # its cached token is due: it reads the record again
    with pytest.raises(SignInRequired, match="restart the replicas"):
        await replica.get_token(GRAPH_SCOPE)


async def test_the_record_opens_only_with_the_settings_key(fleet: Fleet) -> None:
    await fleet.sign_in(fleet.emulator.seed.humans[0].user_principal_name)
    assert fleet.settings.delegated_token_key is not None
    key = SealingKey.from_setting(fleet.settings.delegated_token_key.get_secret_value())
    assert (await SignInStore(fleet.backend, key).read()).record is not None
