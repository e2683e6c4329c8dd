"""The three-hop token flow over httpx.MockTransport: the forms sent, caching, single flight, errors."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr

from service.config import Settings
from service.doctor.app_token import AgentIdentityAppToken
from service.from_settings.graph_auth import token_provider_from_settings
from service.graph.auth import (
    STORAGE_SCOPE,
    AgentUserIdentity,
    AgentUserTokenProvider,
    BlueprintCertificate,
    BlueprintCredential,
    BlueprintFederatedTokenFile,
    BlueprintSecret,
    storage_token_provider,
)
from service.graph.auth.credentials import JWT_BEARER
from service.graph.auth.hop_forms import EXCHANGE_SCOPE
from service.graph.errors import TokenAcquisitionError, TokenConfigurationError
from service.telemetry.metrics import GraphMetrics, Metrics
from tests.graph.conftest import CertificateFiles

AUTHORITY = "https://login.test"
TENANT = "tenant-1"
TOKEN_URL = f"{AUTHORITY}/{TENANT}/oauth2/v2.0/token"
GRAPH = "https://graph.microsoft.com/.default"
IDENTITY = AgentUserIdentity(AUTHORITY, TENANT, "blueprint-app", "agent-identity", "agent-user")


class FakeEntra:
    """Answers the three hops; ``fail`` maps a hop number to an Entra error it answers instead."""

    def __init__(self, lifetime: int = 3600) -> None:
        self.forms: list[dict[str, str]] = []
        self.lifetime = lifetime
        self.fail: dict[int, tuple[int, dict[str, object]]] = {}
        self.counter: Counter[int] = Counter()

    @staticmethod
    def hop_of(form: dict[str, str]) -> int:
        if form["grant_type"] == "user_fic":
            return 3
        return 1 if "fmi_path" in form else 2

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        assert str(request.url) == TOKEN_URL
        form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
        self.forms.append(form)
        hop = self.hop_of(form)
        self.counter[hop] += 1
        await asyncio.sleep(0)  # let concurrent callers pile up behind the in-flight request
        if hop in self.fail:
            status, body = self.fail[hop]
            return httpx.Response(status, json=body)
        return httpx.Response(
            200, json={"access_token": f"T{hop}-{self.counter[hop]}", "expires_in": self.lifetime}
        )


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def provider(
    entra: FakeEntra,
    credential: BlueprintCredential | None = None,
    *,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
) -> AgentUserTokenProvider:
    return AgentUserTokenProvider(
        IDENTITY,
        credential or BlueprintSecret("s3cret-value"),
        http=httpx.AsyncClient(transport=httpx.MockTransport(entra)),
        metrics=(metrics or Metrics()).graph,
        clock=clock or Clock(),
    )


async def test_three_hops_send_the_documented_forms() -> None:
    entra = FakeEntra()
    token = await provider(entra).get_token(GRAPH)
    assert token.token == "T3-1"
    hop1, hop2, hop3 = entra.forms
    assert hop1 == {
        "grant_type": "client_credentials",
        "client_id": "blueprint-app",
        "scope": EXCHANGE_SCOPE,
        "fmi_path": "agent-identity",
        "client_secret": "s3cret-value",
    }
    assert hop2 == {
        "grant_type": "client_credentials",
        "client_id": "agent-identity",
        "scope": EXCHANGE_SCOPE,
        "client_assertion_type": JWT_BEARER,
        "client_assertion": "T1-1",
    }
    assert hop3 == {
        "grant_type": "user_fic",
        "client_id": "agent-identity",
        "scope": GRAPH,
        "client_assertion_type": JWT_BEARER,
        "client_assertion": "T1-1",
        "user_id": "agent-user",
        "user_federated_identity_credential": "T2-1",
    }


async def test_agent_identity_app_token_is_hop_two_asked_for_graph_sharing_hop_one() -> None:
    entra = FakeEntra()
    p = provider(entra)
    await p.get_token(GRAPH)
    app_only = p.agent_identity_tokens()
    first, again = await app_only.get_token(GRAPH), await app_only.get_token(GRAPH)
    assert first == again and first.token == "T2-2"  # the second hop-2 token, cached
    assert entra.counter == Counter({1: 1, 2: 2, 3: 1})
    assert entra.forms[-1] == {
        "grant_type": "client_credentials",
        "client_id": "agent-identity",
        "scope": GRAPH,
        "client_assertion_type": JWT_BEARER,
        "client_assertion": "T1-1",
    }
    app_only.invalidate(GRAPH, first.token)
    assert (await app_only.get_token(GRAPH)).token == "T2-3"
    assert (await p.get_token(GRAPH)).token == "T3-1"  # the user token is not disturbed


async def test_the_doctors_app_token_asks_entra_exactly_what_the_fleet_asks() -> None:
    fleet_entra, doctor_entra = FakeEntra(), FakeEntra()
    await provider(fleet_entra).agent_identity_tokens().get_token(GRAPH)
    doctor = AgentIdentityAppToken(
        AUTHORITY,
        TENANT,
        "blueprint-app",
        BlueprintSecret("s3cret-value"),
        "agent-identity",
        http=httpx.AsyncClient(transport=httpx.MockTransport(doctor_entra)),
    )
    await doctor.get_token(GRAPH)
    assert doctor_entra.forms == fleet_entra.forms
    assert [FakeEntra.hop_of(f) for f in doctor_entra.forms] == [1, 2]


async def test_hundred_concurrent_callers_cause_one_request_per_hop() -> None:
    entra = FakeEntra()
    p = provider(entra)
    tokens = await asyncio.gather(*(p.get_token(GRAPH) for _ in range(100)))
    assert {t.token for t in tokens} == {"T3-1"}
    assert entra.counter == Counter({1: 1, 2: 1, 3: 1})


async def test_concurrent_callers_share_one_failure_instead_of_each_retrying() -> None:
    entra = FakeEntra()
    entra.fail[1] = (
        401,
        {
            "error": "invalid_client",
            "error_description": "AADSTS7000215: Invalid client secret.",
            "error_codes": [7000215],
        },
    )
    p = provider(entra)
    results = await asyncio.gather(*(p.get_token(GRAPH) for _ in range(20)), return_exceptions=True)
    assert all(isinstance(r, TokenAcquisitionError) and r.hop == 1 for r in results)
    assert entra.counter[1] == 1


async def test_second_scope_reuses_the_exchange_tokens() -> None:
    entra = FakeEntra()
    p = provider(entra)
    await p.get_token(GRAPH)
    await p.get_token(STORAGE_SCOPE)
    assert entra.counter == Counter({1: 1, 2: 1, 3: 2})
    assert entra.forms[-1]["scope"] == STORAGE_SCOPE


async def test_tokens_are_refreshed_within_the_margin_before_expiry() -> None:
    entra, clock = FakeEntra(lifetime=3600), Clock()
    p = provider(entra, clock=clock)
    await p.get_token(GRAPH)
    clock.now += 3600 - 301  # just outside the 300 s margin: still cached
    assert (await p.get_token(GRAPH)).token == "T3-1"
    clock.now += 2  # inside the margin: every hop is refreshed
    assert (await p.get_token(GRAPH)).token == "T3-2"
    assert entra.counter == Counter({1: 2, 2: 2, 3: 2})


async def test_short_lived_token_is_cached_for_half_its_life_not_refetched_every_call() -> None:
    entra, clock = FakeEntra(lifetime=120), Clock()
    p = provider(entra, clock=clock)
    await p.get_token(GRAPH)
    clock.now += 59
    await p.get_token(GRAPH)
    assert entra.counter[3] == 1


async def test_invalidating_a_stale_token_keeps_the_fresh_one() -> None:
    entra = FakeEntra()
    p = provider(entra)
    first = await p.get_token(GRAPH)
    p.invalidate(GRAPH, first.token)
    second = await p.get_token(GRAPH)
    p.invalidate(GRAPH, first.token)  # a late 401 for the old token
    assert (await p.get_token(GRAPH)).token == second.token
    assert entra.counter[3] == 2


async def test_invalidating_the_user_token_re_derives_the_exchange_tokens() -> None:
    entra = FakeEntra()
    p = provider(entra)
    await p.get_token(GRAPH)
    p.invalidate(GRAPH)
    await p.get_token(GRAPH)
    assert entra.counter == Counter({1: 2, 2: 2, 3: 2})


@pytest.mark.parametrize(
    ("hop", "name", "sent"),
    [(1, "blueprint", "s3cret-value"), (2, "agent identity", "T1-1"), (3, "agent user", "T2-1")],
)
async def test_a_rejected_hop_is_named_with_its_aadsts_code_and_the_credential_redacted(
    hop: int, name: str, sent: str
) -> None:
    entra = FakeEntra()
    entra.fail[hop] = (
        400,
        {
            "error": "invalid_request",
            "error_description": f"AADSTS50000: We got {sent}, which is bad.\r\nTrace ID: abc\r\nCorrelation ID: d",
            "error_codes": [50000],
        },
    )
    metrics = Metrics()
    with pytest.raises(TokenAcquisitionError) as caught:
        await provider(entra, metrics=metrics).get_token(GRAPH)
    error = caught.value
    assert (error.hop, error.hop_name, error.code, error.status) == (hop, name, "AADSTS50000", 400)
    assert f"hop {hop} ({name})" in str(error)
    assert sent not in str(error) and "[redacted]" in str(error) and "Trace ID" not in str(error)
    label = name.replace(" ", "_")
    labels = {"hop": label, "outcome": "rejected"}
    assert metrics.registry.get_sample_value("entrabot_token_requests_total", labels) == 1


async def test_token_endpoint_5xx_is_retried_because_asking_for_a_token_has_no_side_effect() -> (
    None
):
    entra = FakeEntra()
    answers = iter([httpx.Response(503, json={"error": "temporarily_unavailable"})])

    async def flaky(request: httpx.Request) -> httpx.Response:
        answer = next(answers, None)
        return answer if answer is not None else await entra(request)

    p = AgentUserTokenProvider(
        IDENTITY,
        BlueprintSecret("x"),
        http=httpx.AsyncClient(transport=httpx.MockTransport(flaky)),
        metrics=GraphMetrics(),
        clock=Clock(),
        sleep=_no_sleep,
    )
    assert (await p.get_token(GRAPH)).token == "T3-1"


async def _no_sleep(seconds: float) -> None:
    return None


async def test_certificate_assertion_is_rs256_with_sha256_thumbprint_and_fresh_jti(
    certificate: CertificateFiles,
) -> None:
    entra = FakeEntra()
    p = provider(entra, BlueprintCertificate(certificate.combined_path))
    await p.get_token(GRAPH)
    p.invalidate(GRAPH)
    await p.get_token(GRAPH)
    assertions = [f["client_assertion"] for f in entra.forms if "fmi_path" in f]
    assert len(assertions) == 2 and all(
        f.get("client_assertion_type") == JWT_BEARER for f in entra.forms
    )
    der = certificate.certificate.public_bytes(serialization.Encoding.DER)
    thumb = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
    public_key = certificate.certificate.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)  # the dev certificate's key signs RS256
    claims = []
    for assertion in assertions:
        header = jwt.get_unverified_header(assertion)
        assert header["alg"] == "RS256" and header["x5t#S256"] == thumb
        claims.append(
            jwt.decode(
                assertion,
                public_key,
                algorithms=["RS256"],
                audience=TOKEN_URL,
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False},
            )
        )
    assert all(c["iss"] == c["sub"] == "blueprint-app" and c["exp"] > c["nbf"] for c in claims)
    assert claims[0]["jti"] != claims[1]["jti"]


def test_certificate_with_a_foreign_key_is_refused(
    tmp_path: Path, certificate: CertificateFiles
) -> None:
    from tests.graph.conftest import make_certificate

    other = make_certificate(tmp_path, "other")
    with pytest.raises(ValueError, match="does not belong"):
        BlueprintCertificate(certificate.cert_path, other.key_path)
    assert "BEGIN" not in repr(BlueprintCertificate(certificate.cert_path, certificate.key_path))


async def test_federated_token_file_is_re_read_for_every_blueprint_hop(tmp_path: Path) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("projected-1\n")
    entra = FakeEntra()
    p = provider(entra, BlueprintFederatedTokenFile(token_file))
    await p.get_token(GRAPH)
    token_file.write_text("projected-2\n")  # the kubelet rotated it
    p.invalidate(GRAPH)
    await p.get_token(GRAPH)
    assert [f["client_assertion"] for f in entra.forms if "fmi_path" in f] == [
        "projected-1",
        "projected-2",
    ]


async def test_missing_federated_token_file_fails_hop_one_without_a_request(tmp_path: Path) -> None:
    entra = FakeEntra()
    with pytest.raises(TokenAcquisitionError) as caught:
        await provider(entra, BlueprintFederatedTokenFile(tmp_path / "absent")).get_token(GRAPH)
    assert caught.value.hop == 1 and entra.forms == []


async def test_storage_adapter_returns_token_and_expiry_for_the_storage_scope() -> None:
    entra, clock = FakeEntra(lifetime=3600), Clock()
    get = storage_token_provider(provider(entra, clock=clock))
    token, expires_on = await get()
    assert (token, expires_on) == ("T3-1", clock.now + 3600)
    assert entra.forms[-1]["scope"] == STORAGE_SCOPE


def settings(**values: Any) -> Settings:
    base: dict[str, Any] = {
        "tenant_id": TENANT,
        "blueprint_client_id": "bp",
        "agent_identity_id": "ai",
        "agent_user_id": "au",
        "blueprint_client_secret": SecretStr("x"),
    }
    base.update(values)
    return Settings(_env_file=None, **base)


def test_settings_missing_identity_ids_name_every_variable() -> None:
    with pytest.raises(TokenConfigurationError) as caught:
        token_provider_from_settings(
            settings(tenant_id=None, agent_user_id=None),
            httpx.AsyncClient(),
            metrics=GraphMetrics(),
        )
    assert "ENTRABOT_TENANT_ID" in str(caught.value) and "ENTRABOT_AGENT_USER_ID" in str(
        caught.value
    )
    assert "ENTRABOT_AGENT_IDENTITY_ID" not in str(caught.value)


def test_settings_without_a_credential_list_the_three_choices() -> None:
    with pytest.raises(TokenConfigurationError, match="ENTRABOT_BLUEPRINT_FEDERATED_TOKEN_FILE"):
        token_provider_from_settings(
            settings(blueprint_client_secret=None), httpx.AsyncClient(), metrics=GraphMetrics()
        )


def test_settings_with_two_credentials_are_refused(certificate: CertificateFiles) -> None:
    both = "ENTRABOT_BLUEPRINT_CERTIFICATE_PATH and ENTRABOT_BLUEPRINT_CLIENT_SECRET"
    with pytest.raises(TokenConfigurationError, match=both):
        token_provider_from_settings(
            settings(blueprint_certificate_path=certificate.combined_path),
            httpx.AsyncClient(),
            metrics=GraphMetrics(),
        )


def test_settings_with_an_unreadable_certificate_name_the_variable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(TokenConfigurationError, match="ENTRABOT_BLUEPRINT_CERTIFICATE_PATH"):
        token_provider_from_settings(
            settings(blueprint_client_secret=None, blueprint_certificate_path=bad),
            httpx.AsyncClient(),
            metrics=GraphMetrics(),
        )


def test_settings_with_a_key_path_but_no_certificate_are_refused(
    certificate: CertificateFiles,
) -> None:
    with pytest.raises(
        TokenConfigurationError, match="ENTRABOT_BLUEPRINT_CERTIFICATE_KEY_PATH is set but"
    ):
        token_provider_from_settings(
            settings(blueprint_certificate_key_path=certificate.key_path),
            httpx.AsyncClient(),
            metrics=GraphMetrics(),
        )


def test_settings_with_a_missing_federated_token_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenConfigurationError, match="does not exist"):
        token_provider_from_settings(
            settings(
                blueprint_client_secret=None, blueprint_federated_token_file=tmp_path / "nope"
            ),
            httpx.AsyncClient(),
            metrics=GraphMetrics(),
        )


def test_settings_build_a_certificate_provider_from_split_files(
    certificate: CertificateFiles,
) -> None:
    p = token_provider_from_settings(
        settings(
            blueprint_client_secret=None,
            blueprint_certificate_path=certificate.cert_path,
            blueprint_certificate_key_path=certificate.key_path,
        ),
        httpx.AsyncClient(),
        metrics=GraphMetrics(),
    )
    assert "certificate" in p.describe() and "BEGIN" not in p.describe()
