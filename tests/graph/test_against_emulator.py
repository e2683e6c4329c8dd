"""The Graph client and the three-hop token flow over real HTTP against the Graph + Entra emulator.

Counts and orders are read from the emulator's own statistics (/_emulator/stats), never from the
client's view of itself; the one time measurement, the Retry-After gap, comes from the emulator's
request timestamps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.seed import Seed, build_seed, demo_seed_path, load_seed
from emulator.server import RunningEmulator, start_emulator
from service.config import Settings
from service.from_settings.graph_auth import token_provider_from_settings
from service.graph import GraphClient, GraphOptions, GraphServerError, new_http_client
from service.graph.auth import (
    GRAPH_SCOPE,
    STORAGE_SCOPE,
    AgentUserIdentity,
    AgentUserTokenProvider,
    BlueprintCertificate,
    BlueprintCredential,
    BlueprintFederatedTokenFile,
    BlueprintSecret,
)
from service.graph.errors import GraphForbidden, TokenAcquisitionError
from service.graph.retry_policy import RetryPolicy
from service.telemetry.metrics import Metrics
from tests.graph.conftest import CertificateFiles

TOKEN_ROUTE = "POST /{tenant}/oauth2/v2.0/token"
FAST_BACKOFF = RetryPolicy(backoff_base=0.02, backoff_cap=0.1)


@dataclass
class Tenant:
    emulator: RunningEmulator
    http: httpx.AsyncClient
    metrics: Metrics

    @property
    def seed(self) -> Seed:
        return self.emulator.seed

    def provider(
        self,
        credential: BlueprintCredential | None = None,
        *,
        agent_identity_id: str | None = None,
        agent_user_id: str | None = None,
    ) -> AgentUserTokenProvider:
        seed = self.seed
        identity = AgentUserIdentity(
            self.emulator.authority,
            seed.tenant_id,
            seed.blueprint.app_id,
            agent_identity_id or seed.agent_identity.id,
            agent_user_id or seed.agent_user.id,
        )
        return AgentUserTokenProvider(
            identity,
            credential or BlueprintSecret(seed.blueprint.client_secrets[0]),
            http=self.http,
            metrics=self.metrics.graph,
        )

    def client(
        self,
        provider: AgentUserTokenProvider | None = None,
        *,
        retry_policy: RetryPolicy = FAST_BACKOFF,
        **kwargs: Any,
    ) -> GraphClient:
        return GraphClient(
            GraphOptions(self.emulator.graph_url, retry=retry_policy),
            provider or self.provider(),
            http=self.http,
            metrics=self.metrics.graph,
            **kwargs,
        )

    async def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = await self.http.request(method, f"{self.emulator.admin_url}/{path}", json=body)
        response.raise_for_status()
        return response.json()

    async def stats(self) -> dict[str, Any]:
        return await self.admin("GET", "stats?recent=5000")

    async def statuses(self, method: str, path: str) -> list[int]:
        """The statuses of requests to a raw path, in order. (Read by path: the emulator files requests
        it answered with an injected fault or a forced 429 under the route "<unmatched>".)"""
        stats = await self.stats()
        return [r["status"] for r in stats["recent"] if r["method"] == method and r["path"] == path]

    async def token_requests_by_client(self) -> Counter[str]:
        """Token-endpoint requests per client_id: hop 1 is the blueprint, hops 2 and 3 the agent identity."""
        stats = await self.stats()
        return Counter(
            r["app_id"] for r in stats["recent"] if f"{r['method']} {r['route']}" == TOKEN_ROUTE
        )

    def hop_count(self, hop: str, outcome: str = "ok") -> float:
        labels = {"hop": hop, "outcome": outcome}
        return (
            self.metrics.registry.get_sample_value("entrabot_token_requests_total", labels) or 0.0
        )


@asynccontextmanager
async def running_tenant(seed: Seed) -> AsyncIterator[Tenant]:
    with start_emulator(seed) as emulator:
        http = new_http_client()
        try:
            yield Tenant(emulator, http, Metrics())
        finally:
            await http.aclose()


@pytest.fixture
async def tenant() -> AsyncIterator[Tenant]:
    async with running_tenant(build_seed(chats=3, humans=4, history=5)) as t:
        yield t


# --- paging ---------------------------------------------------------------------------------


async def test_chat_messages_are_paged_past_three_pages_newest_first() -> None:
    async with running_tenant(build_seed(chats=1, history=170)) as tenant:
        chat_id = tenant.seed.chats[0].id
        assert chat_id is not None
        client = tenant.client()
        pages = [p async for p in client.messages.list_chat_messages(chat_id, since=None, top=50)]
        messages = [m for p in pages for m in p.items]

        assert [len(p.items) for p in pages] == [50, 50, 50, 20]
        assert len({m.id for m in messages}) == 170
        stamps = [m.modified_or_created for m in messages]
        assert stamps == sorted(stamps, reverse=True)
        counts = (await tenant.stats())["counts"]
        # One chat is read at most once a second (Graph's limit): pages that came too soon were answered
        # 429 and sent again after Retry-After; four pages arrived.
        assert counts["GET /v1.0/chats/{id}/messages"]["200"] == 4

        # The watermark filter returns only what is newer, still newest first.
        since = messages[59].modified_or_created
        newer = [
            m.id
            async for p in client.messages.list_chat_messages(chat_id, since=since)
            for m in p.items
        ]
        assert newer == [m.id for m in messages[:59]]


async def test_chat_sweep_reads_every_page_of_my_chats() -> None:
    async with running_tenant(build_seed(chats=120, history=1)) as tenant:
        chats, complete = await tenant.client().chats.list_my_chats()
        assert complete is True
        assert {c.id for c in chats} == {c.id for c in tenant.seed.chats}
        assert all(c.last_message_preview is not None and c.members for c in chats)
        assert (await tenant.stats())["counts"]["GET /v1.0/me/chats"] == {"200": 3}


# --- throttling and server errors -----------------------------------------------------------


async def test_retry_after_is_honoured_as_seen_by_the_emulator(tenant: Tenant) -> None:
    client = tenant.client()
    await client.directory.get_me()  # tokens first, so only Graph requests follow
    await tenant.admin("POST", "stats/reset")
    await tenant.admin("POST", "throttle", {"requests": 1, "retry_after": 1})

    me = await client.directory.get_me()

    assert me.id == tenant.seed.agent_user.id
    calls = [r for r in (await tenant.stats())["recent"] if r["path"] == "/v1.0/me"]
    assert [r["status"] for r in calls] == [429, 200]
    assert calls[1]["monotonic"] - calls[0]["monotonic"] >= 1.0
    assert (
        tenant.metrics.registry.get_sample_value("entrabot_graph_throttles_total", {"route": "me"})
        == 1
    )


async def test_server_errors_on_a_get_are_retried_until_it_succeeds(tenant: Tenant) -> None:
    client = tenant.client()
    await tenant.admin("POST", "faults", {"status": 502, "route_pattern": "^/v1.0/me$", "count": 2})
    me = await client.directory.get_me()
    assert me.id == tenant.seed.agent_user.id
    assert await tenant.statuses("GET", "/v1.0/me") == [502, 502, 200]


async def test_a_send_that_failed_after_taking_effect_is_not_resent(tenant: Tenant) -> None:
    chat_id = tenant.seed.chats[1].id
    assert chat_id is not None
    client = tenant.client()
    await tenant.admin(
        "POST",
        "faults",
        {
            "status": 503,
            "method": "POST",
            "route_pattern": "/messages$",
            "count": 1,
            "after_commit": True,
        },
    )
    with pytest.raises(GraphServerError) as caught:
        await client.messages.send_chat_message(chat_id, "only once, please")
    assert caught.value.outcome_unknown
    newest = await client.messages.get_newest_chat_message(chat_id)
    assert newest is not None and newest.body.content == "only once, please"
    assert await tenant.statuses("POST", f"/v1.0/chats/{chat_id}/messages") == [503]


# --- tokens ---------------------------------------------------------------------------------


async def test_hundred_concurrent_callers_cause_one_token_request_per_hop(tenant: Tenant) -> None:
    provider = tenant.provider()
    tokens = await asyncio.gather(*(provider.get_token(GRAPH_SCOPE) for _ in range(100)))
    assert len({t.token for t in tokens}) == 1
    assert await tenant.token_requests_by_client() == Counter(
        {tenant.seed.blueprint.app_id: 1, tenant.seed.agent_identity.id: 2}
    )
    assert [tenant.hop_count(h) for h in ("blueprint", "agent_identity", "agent_user")] == [1, 1, 1]


async def test_revoked_token_mid_run_is_recovered_with_exactly_one_refresh(tenant: Tenant) -> None:
    client = tenant.client()
    await client.directory.get_me()
    await tenant.admin("POST", "stats/reset")
    await tenant.admin("POST", "revoke", {"all": True})

    # 12 callers: with their retries they stay inside the emulator's 30 requests/s budget.
    results = await asyncio.gather(*(client.directory.get_me() for _ in range(12)))

    assert {u.id for u in results} == {tenant.seed.agent_user.id}
    assert await tenant.token_requests_by_client() == Counter(
        {tenant.seed.blueprint.app_id: 1, tenant.seed.agent_identity.id: 2}
    )
    assert tenant.hop_count("agent_user") == 2  # the first token, and the one refresh
    counts = (await tenant.stats())["counts"]["GET /v1.0/me"]
    assert counts == {"200": 12, "401": counts["401"]} and 1 <= counts["401"] <= 12


async def test_storage_scope_token_is_a_separate_hop_three_on_the_same_exchange(
    tenant: Tenant,
) -> None:
    provider = tenant.provider()
    graph = await provider.get_token(GRAPH_SCOPE)
    storage = await provider.get_token(STORAGE_SCOPE)
    assert (
        jwt.decode(storage.token, options={"verify_signature": False})["aud"]
        == "https://storage.azure.com"
    )
    assert graph.token != storage.token
    assert [tenant.hop_count(h) for h in ("blueprint", "agent_identity", "agent_user")] == [1, 1, 2]


async def test_wrong_blueprint_secret_is_rejected_at_hop_one(tenant: Tenant) -> None:
    with pytest.raises(TokenAcquisitionError) as caught:
        await tenant.provider(BlueprintSecret("not-the-secret")).get_token(GRAPH_SCOPE)
    error = caught.value
    assert (error.hop, error.hop_name, error.code) == (1, "blueprint", "AADSTS7000215")
    assert "not-the-secret" not in str(error)


async def test_wrong_agent_identity_is_rejected_at_the_hop_that_names_it(tenant: Tenant) -> None:
    # The blueprint names its agent identity in hop 1 (fmi_path), so that is where Entra refuses it.
    stranger = str(uuid.uuid4())
    with pytest.raises(TokenAcquisitionError) as caught:
        await tenant.provider(agent_identity_id=stranger).get_token(GRAPH_SCOPE)
    error = caught.value
    assert (error.hop, error.code) == (1, "AADSTS700016")
    assert stranger in str(error) and "ENTRABOT_AGENT_IDENTITY_ID" in str(error)


@pytest.mark.parametrize("who", ["a human", "nobody"])
async def test_wrong_agent_user_is_rejected_at_hop_three(tenant: Tenant, who: str) -> None:
    user_id = tenant.seed.humans[0].id if who == "a human" else str(uuid.uuid4())
    with pytest.raises(TokenAcquisitionError) as caught:
        await tenant.provider(agent_user_id=user_id).get_token(GRAPH_SCOPE)
    error = caught.value
    assert (error.hop, error.hop_name) == (3, "agent user")
    assert error.code == ("AADSTS82001" if who == "a human" else "AADSTS50034")
    assert "ENTRABOT_AGENT_USER_ID" in str(error)
    # Hops 1 and 2 succeeded; only the user exchange was refused.
    assert (
        tenant.hop_count("agent_identity") == 1 and tenant.hop_count("agent_user", "rejected") == 1
    )


def with_blueprint(seed: Seed, **changes: Any) -> Seed:
    """The seed with its blueprint app changed (secrets removed): only the new credential can work."""
    data = seed.model_dump(mode="json")
    data.update(changes.pop("_seed", {}))
    for app in data["apps"]:
        if app["app_id"] == seed.blueprint.app_id:
            app.update(client_secrets=[], **changes)
    return Seed.model_validate(data)


async def test_certificate_credential_works_end_to_end(certificate: CertificateFiles) -> None:
    seed = with_blueprint(build_seed(chats=1), certificates=[certificate.cert_pem.decode()])
    async with running_tenant(seed) as tenant:
        client = tenant.client(
            tenant.provider(BlueprintCertificate(certificate.cert_path, certificate.key_path))
        )
        assert (await client.directory.get_me()).id == seed.agent_user.id


class ProjectedTokens:
    """An OIDC issuer such as AKS's, writing service-account tokens into a file like the kubelet."""

    issuer = "https://oidc.aks.test/6a1d/"
    subject = "system:serviceaccount:entrabot:entrabot"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}

    def rotate(self, *, key: rsa.RSAPrivateKey | None = None) -> None:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": self.subject,
            "aud": ["api://AzureADTokenExchange"],
            "iat": now,
            "nbf": now,
            "exp": now + int(timedelta(hours=1).total_seconds()),
            "jti": str(uuid.uuid4()),
        }
        self.path.write_text(
            jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": "k1"})
        )


async def test_federated_token_file_works_end_to_end_and_is_re_read_after_rotation(
    tmp_path: Path,
) -> None:
    projected = ProjectedTokens(tmp_path / "azure-identity-token")
    federated = [{"name": "aks", "issuer": projected.issuer, "subject": projected.subject}]
    seed = with_blueprint(
        build_seed(chats=1),
        federated_credentials=federated,
        _seed={"federation_issuers": [{"issuer": projected.issuer, "jwks": projected.jwks}]},
    )
    async with running_tenant(seed) as tenant:
        provider = tenant.provider(BlueprintFederatedTokenFile(projected.path))
        projected.rotate()
        first = await provider.get_token(GRAPH_SCOPE)
        assert (
            jwt.decode(first.token, options={"verify_signature": False})["oid"]
            == seed.agent_user.id
        )

        # A token from a key the issuer does not publish proves the file is read again on hop 1 …
        projected.rotate(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))
        provider.invalidate(GRAPH_SCOPE)
        with pytest.raises(TokenAcquisitionError) as caught:
            await provider.get_token(GRAPH_SCOPE)
        assert (caught.value.hop, caught.value.code) == (1, "AADSTS50013")

        # … and the next rotation is picked up without restarting anything.
        projected.rotate()
        assert (await provider.get_token(GRAPH_SCOPE)).token != first.token


# --- payloads -------------------------------------------------------------------------------


class TamperingTransport(httpx.AsyncBaseTransport):
    """Real HTTP to the emulator, with the second item of each chat-message page made unreadable."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "GET" or not request.url.path.endswith("/messages"):
            return response
        body = json.loads(await response.aread())
        if len(body.get("value", [])) > 1:
            body["value"][1]["createdDateTime"] = {"not": "a time"}
        return httpx.Response(
            response.status_code, headers={"content-type": "application/json"}, json=body
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_malformed_items_from_the_wire_are_skipped_with_a_warning_and_counted(
    tenant: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    chat_id = tenant.seed.chats[1].id
    assert chat_id is not None
    async with httpx.AsyncClient(transport=TamperingTransport()) as tampered:
        client = GraphClient(
            GraphOptions(tenant.emulator.graph_url),
            tenant.provider(),
            http=tampered,
            metrics=tenant.metrics.graph,
        )
        with caplog.at_level(logging.WARNING, logger="service.graph.pages"):
            pages = [p async for p in client.messages.list_chat_messages(chat_id, since=None)]
    assert [(len(p.items), p.skipped) for p in pages] == [(4, 1)]
    assert (
        tenant.metrics.registry.get_sample_value(
            "entrabot_graph_malformed_items_total", {"kind": "chat message"}
        )
        == 1
    )
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "service.graph.pages"]
    assert "chat message" in warning and "createdDateTime" in warning and "message 3" not in warning


# --- the calls the workers and tools make ---------------------------------------------------


async def test_every_client_call_works_against_the_emulator(tenant: Tenant) -> None:
    seed = tenant.seed
    client = tenant.client()
    agent = seed.agent_user.id
    ada, grace, katherine = (h.id for h in seed.humans[:3])

    assert (await client.directory.get_user(ada)).display_name == "Ada Lovelace"
    with pytest.raises(GraphForbidden):  # Graph lists sponsors to no delegated token
        await client.directory.list_sponsors(seed.agent_identity.id)
    directory = client.with_tokens(tenant.provider().agent_identity_tokens())
    sponsors = await directory.directory.list_sponsors(seed.agent_identity.id)
    assert [(s.id, s.odata_type) for s in sponsors] == [
        (ada, "#microsoft.graph.user")
    ]  # the emulator's default: each reference typed, as the v1.0 page shows them

    one_on_one = await client.chats.create_chat("oneOnOne", [agent, ada])
    assert one_on_one.id == seed.chats[0].id  # Graph returns the existing 1:1 chat
    group = await client.chats.create_chat("group", [agent, ada, grace], topic="Plans")
    await client.chats.add_chat_member(group.id, katherine)
    assert {m.user_id for m in await client.chats.list_chat_members(group.id)} == {
        agent,
        ada,
        grace,
        katherine,
    }
    fetched = await client.chats.get_chat(group.id)
    assert fetched.topic == "Plans" and len(fetched.members) == 4

    sent = await client.messages.send_chat_message(group.id, "hello <team>")
    newest = await client.messages.get_newest_chat_message(group.id)
    assert newest is not None and newest.id == sent.id
    assert newest.sender is not None and newest.sender.id == agent and not newest.is_system

    await tenant.admin(
        "POST",
        "mail",
        {"to": agent, "from": "ada@contoso.com", "subject": "Lunch?", "body": "At 12"},
    )
    before = (await client.messages.get_newest_chat_message(group.id)).created_date_time  # type: ignore[union-attr]
    mails = [m async for p in client.mail.list_mail(before - timedelta(minutes=1)) for m in p.items]
    assert [m.subject for m in mails] == ["Lunch?"]
    mail = await client.mail.get_mail(mails[0].id)
    assert (
        mail.sender is not None
        and mail.sender.address == "ada@contoso.com"
        and mail.body.content == "At 12"
    )
    await client.mail.send_mail("ada@contoso.com", "Re: Lunch?", "Yes")


async def test_settings_for_the_demo_tenant_build_a_working_agent_user_client() -> None:
    demo = load_seed(demo_seed_path())
    async with running_tenant(demo) as tenant:
        settings = Settings(
            _env_file=None,
            authority=tenant.emulator.authority,
            graph_url=tenant.emulator.graph_url,
            tenant_id=demo.tenant_id,
            blueprint_client_id=demo.blueprint.app_id,
            blueprint_client_secret=demo.blueprint.client_secrets[0],
            agent_identity_id=demo.agent_identity.id,
            agent_user_id=demo.agent_user.id,
        )
        provider = token_provider_from_settings(settings, tenant.http, metrics=tenant.metrics.graph)
        client = GraphClient(
            GraphOptions(settings.graph_url),
            provider,
            http=tenant.http,
            metrics=tenant.metrics.graph,
        )
        assert (await client.directory.get_me()).id == demo.agent_user.id
        chats, complete = await client.chats.list_my_chats()
        assert complete and len(chats) == len(demo.chats)
