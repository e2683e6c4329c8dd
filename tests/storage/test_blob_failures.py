"""How BlobBackend reports a store it cannot use: unreachable, refusing, failing, or slow.

Azurite gives the real answers where it can (a refused connection, a 403 for a wrong key). It never
answers 401 (it says 403 even to an expired bearer token), so the 401, 5xx, dropped-connection and
timeout cases run against a scripted fake endpoint through the real SDK stack.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from azure.core.exceptions import HttpResponseError, ServiceRequestError
from settings_env import settings_from_env

from service.devstack.azurite import ACCOUNT_KEY, Azurite
from service.from_settings.storage import storage_options
from service.storage.blob import BlobBackend
from service.storage.blob_config import BlobClientOptions
from service.storage.blob_errors import BlobOp, BlobTarget, storage_error_from
from service.storage.errors import (
    BackendMisconfiguredError,
    BackendUnavailableError,
    ConcurrencyError,
    NotAppendableError,
    StorageError,
    TokenExpiredError,
    TransientStorageError,
)
from service.storage.resolution import assert_backend_config
from service.storage.token_credential import TokenProvider
from service.telemetry.metrics import Metrics, StorageMetrics
from tests.storage.storage_fakes import (
    FakeBlobEndpoint,
    TlsFiles,
    answer,
    drop_connection,
    never_answer,
    storage_error,
)

StartFake = Callable[..., Awaitable[FakeBlobEndpoint]]
FAST = BlobClientOptions(
    read_retries=2, read_retry_backoff_s=0.01, connect_timeout_s=2, read_timeout_s=2
)
TARGET = BlobTarget("https://acct.blob.core.windows.net", "fleet", "k")


def fake_backend(fake: FakeBlobEndpoint, options: BlobClientOptions = FAST) -> BlobBackend:
    return BlobBackend.from_connection_string(
        fake.connection_string, "fleet", options=options, metrics=StorageMetrics()
    )


def token_backend(fake: FakeBlobEndpoint, provider: TokenProvider, tls: TlsFiles) -> BlobBackend:
    return BlobBackend.from_token_provider(
        fake.url,
        "fleet",
        provider,
        options=BlobClientOptions(ca_bundle=str(tls.cert)),
        metrics=StorageMetrics(),
    )


# --- real answers from a real process ---


@pytest.mark.timeout(60)
async def test_unreachable_endpoint_fails_the_startup_check_naming_the_endpoint(
    closed_port: int,
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}/devstoreaccount1"
    env = {
        "ENTRABOT_BLOB_ENDPOINT": endpoint,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
        ),
    }
    with pytest.raises(
        BackendUnavailableError, match=f"cannot reach Blob endpoint {endpoint}"
    ) as raised:
        await assert_backend_config(
            storage_options(settings_from_env(env)), metrics=StorageMetrics()
        )
    assert ACCOUNT_KEY not in str(raised.value)


async def test_a_wrong_account_key_is_reported_as_misconfigured(
    azurite: Azurite, container_name: str
) -> None:
    wrong = azurite.connection_string.replace(ACCOUNT_KEY, "A" * 86 + "==")
    async with BlobBackend.from_connection_string(
        wrong, container_name, metrics=StorageMetrics()
    ) as backend:
        # Azurite answers 403 AuthorizationFailure to a bad shared-key signature.
        with pytest.raises(
            BackendMisconfiguredError, match="refused the check \\(HTTP 403 AuthorizationFailure\\)"
        ):
            await backend.check()


def test_a_key_that_is_not_base64_is_misconfigured_before_any_request(azurite: Azurite) -> None:
    broken = azurite.connection_string.replace(ACCOUNT_KEY, "not-base64!")
    with pytest.raises(
        BackendMisconfiguredError, match="AccountKey .* is not valid base64"
    ) as raised:
        BlobBackend.from_connection_string(broken, "fleet", metrics=StorageMetrics())
    assert "not-base64" not in str(raised.value)


async def test_a_read_of_a_missing_container_is_unavailable_not_absent(
    azurite: Azurite, container_name: str
) -> None:
    async with BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=StorageMetrics()
    ) as backend:
        with pytest.raises(BackendUnavailableError):
            await backend.read_text_with_etag("chat_cursors/a.json")
        with pytest.raises(BackendUnavailableError):
            await backend.exists("chat_cursors/a.json")
        with pytest.raises(BackendUnavailableError):
            await backend.list()


async def test_appending_to_a_key_written_whole_is_refused(
    azurite: Azurite, container_name: str
) -> None:
    async with BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=StorageMetrics()
    ) as backend:
        await backend.ensure_container()
        await backend.write_text("promises.jsonl", "{}\n")
        with pytest.raises(NotAppendableError, match="not an append blob") as raised:
            await backend.append_text("promises.jsonl", "{}\n")
        assert not isinstance(raised.value, ConcurrencyError)
        assert await backend.read_text("promises.jsonl") == "{}\n"


async def test_operations_are_counted_by_op_and_outcome(
    azurite: Azurite, container_name: str
) -> None:
    metrics = Metrics()
    async with BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=metrics.storage
    ) as backend:
        await backend.ensure_container()
        etag = await backend.write_text("k", "1")
        await backend.write_text("k", "2", if_match=etag)
        with pytest.raises(ConcurrencyError):
            await backend.write_text("k", "3", if_match=etag)
        await backend.read_text("k")
        await backend.read_text("absent")

    def count(op: str, outcome: str) -> float | None:
        # every key here is top-level: its own area
        return (
            sum(
                metrics.registry.get_sample_value(
                    "entrabot_blob_operations_total", {"op": op, "outcome": outcome, "area": area}
                )
                or 0
                for area in ("k", "absent")
            )
            or None
        )

    assert count("overwrite", "ok") == 1
    assert count("if_match", "ok") == 1
    assert count("if_match", "conflict") == 1
    assert count("read", "ok") == 2
    assert (
        metrics.registry.get_sample_value(
            "entrabot_blob_operation_seconds_count", {"op": "read", "area": "k"}
        )
        == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "entrabot_blob_operation_seconds_count", {"op": "read", "area": "absent"}
        )
        == 1
    )


# --- scripted answers, through the real SDK pipeline ---


async def test_401_is_token_expired_before_anything_else(fake_blob_endpoint: StartFake) -> None:
    # Even an answer that would otherwise read as a lost create race is a 401 first.
    fake = await fake_blob_endpoint(answer(401, "BlobAlreadyExists"))
    async with fake_backend(fake) as backend:
        with pytest.raises(TokenExpiredError, match="answered 401"):
            await backend.write_text("k", "v", if_absent=True)
        with pytest.raises(TokenExpiredError):
            await backend.read_text("k")
        with pytest.raises(TokenExpiredError):
            await backend.append_text("k", "v\n")
    assert fake.count("GET") == 1  # a 401 is not retried blindly


@pytest.mark.parametrize("op", ["if_match", "if_absent", "overwrite", "append"])
async def test_a_write_answered_503_is_sent_once_and_reported_as_an_unknown_outcome(
    fake_blob_endpoint: StartFake, op: str
) -> None:
    fake = await fake_blob_endpoint(answer(503, "ServerBusy"))
    async with fake_backend(fake) as backend:
        with pytest.raises(TransientStorageError, match="may or may not have committed"):
            if op == "append":
                await backend.append_text("log", "line\n")
            else:
                await backend.write_text(
                    "k",
                    "v",
                    if_match='"0x1"' if op == "if_match" else None,
                    if_absent=op == "if_absent",
                )
    assert fake.count("PUT") == 1


async def test_a_read_answered_503_is_retried_then_reported_transient(
    fake_blob_endpoint: StartFake,
) -> None:
    fake = await fake_blob_endpoint(answer(503, "ServerBusy"))
    async with fake_backend(fake) as backend:
        with pytest.raises(TransientStorageError, match="retry later"):
            await backend.read_text_with_etag("k")
    assert fake.count("GET") == 1 + FAST.read_retries


async def test_a_connection_dropped_during_a_write_is_transient_not_unavailable(
    fake_blob_endpoint: StartFake,
) -> None:
    fake = await fake_blob_endpoint(drop_connection)
    async with fake_backend(fake) as backend:
        with pytest.raises(TransientStorageError, match="may or may not have committed"):
            await backend.write_text("k", "v", if_match='"0x1"')
    assert fake.count("PUT") == 1


async def test_a_write_that_times_out_is_transient_with_an_unknown_outcome(
    fake_blob_endpoint: StartFake,
) -> None:
    fake = await fake_blob_endpoint(never_answer)
    async with fake_backend(fake, BlobClientOptions(read_retries=0, read_timeout_s=0.3)) as backend:
        with pytest.raises(TransientStorageError, match="may or may not have committed"):
            await backend.write_text("k", "v", if_absent=True)
    assert fake.count("PUT") == 1


async def test_a_read_whose_connection_drops_is_retried_then_reported_transient(
    fake_blob_endpoint: StartFake,
) -> None:
    fake = await fake_blob_endpoint(drop_connection)
    async with fake_backend(fake) as backend:
        with pytest.raises(TransientStorageError, match="retry later"):
            await backend.read_text("k")
    assert fake.count("GET") == 1 + FAST.read_retries


async def test_the_token_provider_is_asked_once_and_its_token_is_sent(
    fake_blob_endpoint: StartFake, tls_files: TlsFiles
) -> None:
    async def blob_not_found(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != "Bearer agent-user-token":
            return storage_error(401, "InvalidAuthenticationInfo")
        return storage_error(404, "BlobNotFound")

    fake = await fake_blob_endpoint(blob_not_found, tls=True)
    calls = 0

    async def provider() -> tuple[str, float]:
        nonlocal calls
        calls += 1
        return "agent-user-token", time.time() + 3600

    async with token_backend(fake, provider, tls_files) as backend:
        assert await backend.read_text("a") is None
        assert await backend.read_text("b") is None
    assert calls == 1
    assert fake.authorizations == ["Bearer agent-user-token"] * 2


async def test_a_rejected_token_is_token_expired(
    fake_blob_endpoint: StartFake, tls_files: TlsFiles
) -> None:
    fake = await fake_blob_endpoint(answer(401, "InvalidAuthenticationInfo"), tls=True)

    async def provider() -> tuple[str, float]:
        return "expired-token", time.time() + 3600

    async with token_backend(fake, provider, tls_files) as backend:
        with pytest.raises(TokenExpiredError, match="answered 401"):
            await backend.write_text("k", "v", if_match='"0x1"')


async def test_a_failing_token_provider_is_token_expired_and_sends_nothing(
    fake_blob_endpoint: StartFake, tls_files: TlsFiles
) -> None:
    fake = await fake_blob_endpoint(answer(404, "BlobNotFound"), tls=True)

    class HopThreeFailed(Exception):
        pass

    async def provider() -> tuple[str, float]:
        raise HopThreeFailed("AADSTS50013 secret-bearing detail")

    async with token_backend(fake, provider, tls_files) as backend:
        with pytest.raises(
            TokenExpiredError, match="storage token provider failed \\(HopThreeFailed\\)"
        ) as raised:
            await backend.read_text("k")
    assert "secret-bearing" not in str(raised.value)
    assert isinstance(raised.value.__cause__, HopThreeFailed)
    assert fake.requests == []


# --- the mapping itself, for answers only real Azure gives ---


def http_error(status: int, code: str | None) -> HttpResponseError:
    error = HttpResponseError(message=f"HTTP {status}")
    error.status_code = status
    setattr(
        error, "error_code", code
    )  # azure-storage sets it on what it raises; azure-core does not declare it
    return error


@pytest.mark.parametrize(
    ("status", "code", "op", "expected"),
    [
        (401, "ConditionNotMet", BlobOp.IF_MATCH, TokenExpiredError),
        (401, "BlobAlreadyExists", BlobOp.CREATE, TokenExpiredError),
        (
            404,
            "BlobNotFound",
            BlobOp.IF_MATCH,
            ConcurrencyError,
        ),  # Azure: If-Match on a missing blob
        (412, "ConditionNotMet", BlobOp.IF_MATCH, ConcurrencyError),
        (
            412,
            "ConditionNotMet",
            BlobOp.CREATE,
            ConcurrencyError,
        ),  # Azure may answer 412 to If-None-Match: *
        (409, "BlobAlreadyExists", BlobOp.CREATE, ConcurrencyError),
        (409, "LeaseIdMissing", BlobOp.OVERWRITE, StorageError),
        (404, "ContainerNotFound", BlobOp.IF_MATCH, BackendUnavailableError),
        (403, "AuthorizationPermissionMismatch", BlobOp.READ, BackendMisconfiguredError),
        (500, "InternalError", BlobOp.READ, TransientStorageError),
        (429, "TooManyRequests", BlobOp.APPEND, TransientStorageError),
        (408, "OperationTimedOut", BlobOp.OVERWRITE, TransientStorageError),
    ],
)
def test_azure_answers_map_to_storage_errors(
    status: int, code: str, op: BlobOp, expected: type[StorageError]
) -> None:
    assert type(storage_error_from(http_error(status, code), op, TARGET)) is expected


def test_a_request_error_that_is_not_a_failed_connect_is_transient() -> None:
    dropped = ServiceRequestError("Server disconnected", error=ConnectionResetError())
    assert type(storage_error_from(dropped, BlobOp.APPEND, TARGET)) is TransientStorageError
