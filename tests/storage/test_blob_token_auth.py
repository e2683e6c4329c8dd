"""Token auth to Blob (issue 26 item 4): the storage contract through BlobBackend against Azurite with
OAuth (``--oauth basic`` over HTTPS, a certificate made at test time), with the fleet's two token
credentials, both from the emulator's Entra over HTTPS:

- the agent-user storage token (three hops, scope https://storage.azure.com/.default);
- ``DefaultAzureCredential``'s workload-identity path: a federated token file, AZURE_CLIENT_ID,
  AZURE_TENANT_ID and AZURE_AUTHORITY_HOST at the emulator, whose token endpoint takes the
  ``client_assertion`` grant for the blueprint's federated credential.

Every client trusts the test certificate through a CA bundle (BlobClientOptions.ca_bundle, the
credential's ``connection_verify``, httpx's ``verify``); verification is never off. What Azurite checks
of a token, and what Azure checks besides: service.devstack.azurite.AzuriteOAuth.
"""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from settings_env import settings_from_env

from emulator.dev_credentials import DevIssuer, make_issuer, with_blueprint_credentials
from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite, AzuriteOAuth, start_azurite
from service.devstack.emulator_env import agent_user_env
from service.from_settings.graph_auth import token_provider_from_settings
from service.from_settings.storage import storage_options
from service.graph.auth import storage_token_provider
from service.graph.auth.tokens import GRAPH_SCOPE
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.blob_config import BlobClientOptions
from service.storage.errors import TokenExpiredError
from service.storage.resolution import get_backend
from service.storage.token_credential import TokenProvider
from service.telemetry.metrics import GraphMetrics, StorageMetrics
from tests.storage.storage_fakes import TlsFiles

# The contract's tests, run here on token-authenticated backends.
from tests.storage.test_storage_contract import (  # noqa: F401
    test_absent_key_reads_as_none_and_does_not_exist,
    test_append_changes_the_etag,
    test_append_creates_the_key_and_extends_it,
    test_etag_is_a_quoted_opaque_string,
    test_etag_is_stable_across_reads_and_changed_by_a_write,
    test_if_absent_creates_a_missing_key,
    test_if_absent_on_an_existing_key_fails_and_keeps_the_first_value,
    test_if_match_and_if_absent_together_are_refused,
    test_if_match_on_a_missing_key_fails_and_creates_nothing,
    test_if_match_with_the_current_etag_replaces_the_value,
    test_invalid_keys_are_rejected_by_every_operation,
    test_keys_with_percent_colon_at_and_spaces_round_trip,
    test_list_returns_sorted_keys_under_the_prefix_only,
    test_stale_if_match_fails_and_racing_content_survives,
    test_unconditional_write_overwrites,
    test_written_key_reads_back_with_the_etag_the_write_returned,
)

pytestmark = pytest.mark.azurite


@pytest.fixture(scope="module")
def oauth_azurite(tls_files: TlsFiles) -> Iterator[Azurite]:
    azurite = start_azurite(oauth=AzuriteOAuth(tls_files.cert, tls_files.key))
    try:
        yield azurite
    finally:
        azurite.stop()


@pytest.fixture(scope="module")
def workload_issuer() -> DevIssuer:
    """The AKS OIDC issuer stand-in whose tokens the blueprint's federated credential trusts."""
    return make_issuer()


@pytest.fixture(scope="module")
def https_emulator(tls_files: TlsFiles, workload_issuer: DevIssuer) -> Iterator[RunningEmulator]:
    seed = with_blueprint_credentials(build_seed(chats=1), issuer=workload_issuer)
    with start_emulator(seed, tls=(tls_files.cert, tls_files.key)) as emulator:
        yield emulator


@pytest.fixture
def trusted(tls_files: TlsFiles) -> BlobClientOptions:
    return BlobClientOptions(ca_bundle=str(tls_files.cert))


@pytest.fixture
async def blob_env(oauth_azurite: Azurite, trusted: BlobClientOptions) -> dict[str, str]:
    """A fresh container (made with the account key, as an operator's setup would) and the settings
    that name it."""
    name = "token" + uuid.uuid4().hex[:12]
    async with BlobBackend.from_connection_string(
        oauth_azurite.connection_string, name, options=trusted, metrics=StorageMetrics()
    ) as setup:
        await setup.ensure_container()
    return {"ENTRABOT_BLOB_ENDPOINT": oauth_azurite.blob_endpoint, "ENTRABOT_BLOB_CONTAINER": name}


@pytest.fixture
async def entra_http(tls_files: TlsFiles) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        verify=ssl.create_default_context(cafile=str(tls_files.cert)), timeout=10
    ) as http:
        yield http


def agent_user_settings_env(emulator: RunningEmulator, blob_env: dict[str, str]) -> dict[str, str]:
    return {
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        **blob_env,
        "ENTRABOT_BLOB_AUTH": "agent_user",
    }


def use_workload_identity(
    monkeypatch: pytest.MonkeyPatch, emulator: RunningEmulator, token_file: Path
) -> None:
    """The environment AKS workload identity gives a pod (azure-identity reads it from os.environ)."""
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AZURE_CLIENT_ID", emulator.seed.blueprint.app_id)
    monkeypatch.setenv("AZURE_TENANT_ID", emulator.seed.tenant_id)
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", emulator.base_url)
    # Only the workload-identity credential of the chain: no other one may look elsewhere (IMDS is not
    # on loopback) should this one be unavailable.
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "WorkloadIdentityCredential")
    for name in ("AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_USERNAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["agent_user_token", "workload_identity"])
async def backend(
    request: pytest.FixtureRequest,
    https_emulator: RunningEmulator,
    blob_env: dict[str, str],
    trusted: BlobClientOptions,
    entra_http: httpx.AsyncClient,
    workload_issuer: DevIssuer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> AsyncIterator[MemoryBackend]:
    """The contract's backend: Blob on OAuth Azurite, authenticated by one of the fleet's token paths."""
    if request.param == "agent_user_token":
        settings = settings_from_env(agent_user_settings_env(https_emulator, blob_env))
        provider = storage_token_provider(
            token_provider_from_settings(settings, entra_http, metrics=GraphMetrics())
        )
        store = get_backend(
            storage_options(settings),
            storage_token_provider=provider,
            options=trusted,
            metrics=StorageMetrics(),
        )
    else:
        token_file = tmp_path / "azure-identity-token"
        token_file.write_text(workload_issuer.token())
        use_workload_identity(monkeypatch, https_emulator, token_file)
        store = get_backend(
            storage_options(
                settings_from_env({**blob_env, "ENTRABOT_BLOB_AUTH": "default_credential"})
            ),
            options=trusted,
            metrics=StorageMetrics(),
        )
    assert isinstance(store, BlobBackend)
    try:
        yield store
    finally:
        await store.aclose()


def storage_shaped_token(*, expires_in_s: int, audience: str = "https://storage.azure.com") -> str:
    """A token as Entra issues Storage's (v1 issuer); unsigned for Azurite, which verifies no signature."""
    now = int(time.time())
    claims = {
        "aud": audience,
        "iss": f"https://sts.windows.net/{uuid.uuid4()}/",
        "iat": now - 7200,
        "nbf": now - 7200,
        "exp": now + expires_in_s,
        "oid": str(uuid.uuid4()),
    }
    return jwt.encode(claims, "azurite-verifies-no-signature-of-any-token", algorithm="HS256")


async def test_an_expired_storage_token_surfaces_as_token_expired(
    blob_env: dict[str, str], trusted: BlobClientOptions
) -> None:
    expired = storage_shaped_token(expires_in_s=-60)

    async def stale_provider() -> tuple[str, float]:
        # A cache that believes its token is good for another hour: the store must be the one to say no.
        return expired, time.time() + 3600

    provider: TokenProvider = stale_provider
    async with BlobBackend.from_token_provider(
        blob_env["ENTRABOT_BLOB_ENDPOINT"],
        blob_env["ENTRABOT_BLOB_CONTAINER"],
        provider,
        options=trusted,
        metrics=StorageMetrics(),
    ) as store:
        with pytest.raises(TokenExpiredError, match="refused the storage token"):
            await store.read_text("chat_id")
        with pytest.raises(TokenExpiredError):
            await store.write_text("chat_id", "x", if_absent=True)


async def test_a_token_for_another_resource_is_refused_as_token_expired(
    https_emulator: RunningEmulator,
    blob_env: dict[str, str],
    trusted: BlobClientOptions,
    entra_http: httpx.AsyncClient,
) -> None:
    # The agent user's Graph token, as a wiring mistake would hand it over: the right issuer, the wrong audience.
    settings = settings_from_env(agent_user_settings_env(https_emulator, blob_env))
    tokens = token_provider_from_settings(settings, entra_http, metrics=GraphMetrics())

    async def graph_token() -> tuple[str, float]:
        token = await tokens.get_token(GRAPH_SCOPE)
        return token.token, token.expires_on

    async with BlobBackend.from_token_provider(
        blob_env["ENTRABOT_BLOB_ENDPOINT"],
        blob_env["ENTRABOT_BLOB_CONTAINER"],
        graph_token,
        options=trusted,
        metrics=StorageMetrics(),
    ) as store:
        with pytest.raises(TokenExpiredError):
            await store.exists("chat_id")


async def test_a_federated_token_entra_refuses_surfaces_as_token_expired(
    https_emulator: RunningEmulator,
    blob_env: dict[str, str],
    trusted: BlobClientOptions,
    workload_issuer: DevIssuer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text(workload_issuer.token(subject="system:serviceaccount:other:intruder"))
    use_workload_identity(monkeypatch, https_emulator, token_file)
    store = get_backend(
        storage_options(
            settings_from_env({**blob_env, "ENTRABOT_BLOB_AUTH": "default_credential"})
        ),
        options=trusted,
        metrics=StorageMetrics(),
    )
    try:
        with pytest.raises(TokenExpiredError, match="could not get a storage token"):
            await store.read_text("chat_id")
    finally:
        await store.aclose()
