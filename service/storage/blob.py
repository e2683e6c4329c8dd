"""BlobBackend: the fleet's shared state in one Azure Blob container, on the SDK's async client.

Compare-and-swap is the service's own precondition (``If-Match`` with the blob's real ETag, or
``If-None-Match: *`` to create), so replicas on different machines race safely. Append keys are
append blobs: each ``append_block`` lands whole, and concurrent appenders never overwrite each other.

Retries. Reads retry inside the SDK (idempotent, and a few quick retries hide a blip). Writes never
do: if the first attempt of an If-Match write committed but its response was lost, the SDK's retry
would get 412 and report a lost race for a write that in fact won; a retried If-None-Match create
would report "already exists" for our own key; a retried append would write the line twice. So
every write goes out exactly once (the SDK's retries are off per write call, and aiohttp's own
resend is off: see send_once_transport), and a lost response surfaces as TransientStorageError
("outcome unknown"), which the ledger settles by reading back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from azure.core import MatchConditions
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobProperties, BlobType, ContentSettings
from azure.storage.blob.aio import BlobClient, BlobServiceClient
from opentelemetry import trace

from service.storage.blob_config import (
    BlobClientOptions,
    account_key_is_base64,
    parse_endpoint,
    public_endpoint,
    validate_container_name,
)
from service.storage.blob_errors import BlobOp, BlobTarget, is_blob_not_found, storage_error_from
from service.storage.errors import (
    BackendMisconfiguredError,
    BackendUnavailableError,
    ConcurrencyError,
    StorageError,
    TokenExpiredError,
    TransientStorageError,
)
from service.storage.keys import area_of, validate_key
from service.storage.token_credential import TokenProvider, TokenProviderCredential
from service.telemetry.metrics import StorageMetrics

_tracer = trace.get_tracer(__name__)

_TEXT = ContentSettings(content_type="text/plain; charset=utf-8")
# Per-call override of the client's retry policy; see the module docstring.
_SEND_ONCE: dict[str, Any] = {"retry_total": 0}
_OUTCOMES: tuple[tuple[type[StorageError], str], ...] = (
    (ConcurrencyError, "conflict"),
    (TokenExpiredError, "token_expired"),
    (TransientStorageError, "transient"),
    (BackendUnavailableError, "unavailable"),
    (BackendMisconfiguredError, "misconfigured"),
)


def outcome_label(error: BaseException) -> str:
    for kind, label in _OUTCOMES:
        if isinstance(error, kind):
            return label
    return "error"


class _Calls:
    """One Blob container's SDK calls: failures translated into StorageErrors, each call traced and
    counted."""

    def __init__(self, target: BlobTarget, metrics: StorageMetrics) -> None:
        self._target = target
        self._metrics = metrics

    @asynccontextmanager
    async def __call__(self, op: BlobOp, key: str | None = None) -> AsyncIterator[None]:
        started = time.perf_counter()
        outcome = "cancelled"
        span = _tracer.start_span(
            f"blob.{op.value}", attributes={"entrabot.blob.container": self._target.container}
        )
        try:
            yield
            outcome = "ok"
        except AzureError as exc:
            error = storage_error_from(exc, op, replace(self._target, key=key))
            outcome = outcome_label(error)
            raise error from exc
        except (
            Exception
        ) as exc:  # e.g. a StorageError from the token adapter; recorded, not altered
            outcome = outcome_label(exc)
            raise
        finally:
            span.set_attribute("entrabot.blob.outcome", outcome)
            span.end()
            area = area_of(key)
            self._metrics.blob_operations.labels(op=op.value, outcome=outcome, area=area).inc()
            self._metrics.blob_latency.labels(op=op.value, area=area).observe(
                time.perf_counter() - started
            )


class BlobBackend:
    """A MemoryBackend over one Blob container."""

    def __init__(
        self,
        service: BlobServiceClient,
        container: str,
        *,
        metrics: StorageMetrics,
        owned_credential: AsyncTokenCredential | None = None,
        bearer: bool = False,
    ) -> None:
        self._service = service
        self.container = validate_container_name(container)
        self._container = service.get_container_client(container)
        self._owned_credential = owned_credential
        self.endpoint = public_endpoint(service.url)
        self._call = _Calls(BlobTarget(self.endpoint, self.container, None, bearer), metrics)

    # --- construction ---

    @classmethod
    def from_connection_string(
        cls,
        conn_str: str,
        container: str,
        *,
        metrics: StorageMetrics,
        options: BlobClientOptions = BlobClientOptions(),
    ) -> BlobBackend:
        """Shared-key or SAS auth from a connection string (Azurite and development)."""
        try:
            service = BlobServiceClient.from_connection_string(conn_str, **options.client_kwargs())
        except ValueError:
            # `from None`: the SDK's error must not drag the connection string into a traceback.
            raise BackendMisconfiguredError(
                "ENTRABOT_BLOB_CONNECTION_STRING is malformed; expected "
                "'DefaultEndpointsProtocol=...;AccountName=...;AccountKey=...;BlobEndpoint=...'"
            ) from None
        account_key = getattr(service.credential, "account_key", None)
        if account_key is not None and not account_key_is_base64(account_key):
            # Otherwise the first request fails inside the SDK's signing step with a puzzling error.
            raise BackendMisconfiguredError(
                "the AccountKey in ENTRABOT_BLOB_CONNECTION_STRING is not valid base64; copy the key again"
            )
        return cls(service, container, metrics=metrics)

    @classmethod
    def from_credential(
        cls,
        endpoint: str,
        container: str,
        credential: AsyncTokenCredential,
        *,
        close_credential: bool = False,
        metrics: StorageMetrics,
        options: BlobClientOptions = BlobClientOptions(),
    ) -> BlobBackend:
        """OAuth with an azure-core credential (DefaultAzureCredential for AKS workload identity)."""
        url = parse_endpoint(endpoint, require_https=True)
        service = BlobServiceClient(url, credential=credential, **options.client_kwargs())
        return cls(
            service,
            container,
            owned_credential=credential if close_credential else None,
            metrics=metrics,
            bearer=True,
        )

    @classmethod
    def from_token_provider(
        cls,
        endpoint: str,
        container: str,
        provider: TokenProvider,
        *,
        metrics: StorageMetrics,
        options: BlobClientOptions = BlobClientOptions(),
    ) -> BlobBackend:
        """OAuth with a token from ``provider`` (the agent-user storage token)."""
        return cls.from_credential(
            endpoint,
            container,
            TokenProviderCredential(provider),
            close_credential=True,
            options=options,
            metrics=metrics,
        )

    # --- plumbing ---

    def describe(self) -> str:
        return f"BlobBackend endpoint={self.endpoint} container={self.container}"

    def _blob(self, key: str) -> BlobClient:
        return self._container.get_blob_client(validate_key(key))

    # --- MemoryBackend ---

    async def read_text(self, key: str) -> str | None:
        content, _ = await self.read_text_with_etag(key)
        return content

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        blob = self._blob(key)
        async with self._call(BlobOp.READ, key):
            try:
                downloader = await blob.download_blob()
            except ResourceNotFoundError as exc:
                if is_blob_not_found(exc):
                    return None, None
                raise
            data = await downloader.readall()
            etag = downloader.properties.etag
        return data.decode("utf-8"), etag

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if if_match is not None and if_absent:
            raise ValueError("if_match and if_absent are mutually exclusive")
        blob = self._blob(key)
        condition: dict[str, Any]
        if if_absent:
            op, condition = BlobOp.CREATE, {"match_condition": MatchConditions.IfMissing}
        elif if_match is not None:
            op, condition = (
                BlobOp.IF_MATCH,
                {"etag": if_match, "match_condition": MatchConditions.IfNotModified},
            )
        else:
            op, condition = BlobOp.OVERWRITE, {"overwrite": True}
        async with self._call(op, key):
            result = await blob.upload_blob(
                content.encode("utf-8"), content_settings=_TEXT, **condition, **_SEND_ONCE
            )
        return str(result["etag"])

    async def append_text(self, key: str, content: str) -> None:
        blob = self._blob(key)
        data = content.encode("utf-8")
        async with self._call(BlobOp.APPEND, key):
            if data:
                try:
                    await blob.append_block(data, **_SEND_ONCE)
                    return
                except ResourceNotFoundError as exc:
                    if not is_blob_not_found(exc):
                        raise
            await _create_append_blob(blob)
            if data:
                await blob.append_block(data, **_SEND_ONCE)

    # --- append-type repair (service.storage.log_migration.AppendTypeRepair) ---

    async def accepts_appends(self, key: str) -> bool:
        """False when ``key`` is a block or page blob; an absent key would be created as an append blob."""
        properties = await self._properties(key)
        return properties is None or bool(properties.blob_type == BlobType.APPENDBLOB)

    async def recreate_appendable(self, key: str, *, if_match: str) -> None:
        """Replace ``key`` with an empty append blob, only while its ETag is still ``if_match``.

        Put Blob replaces a blob of any type (Azurite does the same: tests/storage_migration), so the
        If-Match is what keeps a concurrent change from being lost.
        """
        blob = self._blob(key)
        async with self._call(BlobOp.IF_MATCH, key):
            await blob.create_append_blob(
                content_settings=_TEXT,
                etag=if_match,
                match_condition=MatchConditions.IfNotModified,
                **_SEND_ONCE,
            )

    async def exists(self, key: str) -> bool:
        return await self._properties(key) is not None

    async def _properties(self, key: str) -> BlobProperties | None:
        """The blob's properties, None when it is absent."""
        blob = self._blob(key)
        async with self._call(BlobOp.EXISTS, key):
            try:
                return await blob.get_blob_properties()
            except ResourceNotFoundError as exc:
                # Not BlobClient.exists(): it answers False for a missing container as well.
                if is_blob_not_found(exc):
                    return None
                raise

    async def list(self, prefix: str = "") -> list[str]:
        async with self._call(BlobOp.LIST, prefix or None):
            # The pager follows continuation tokens: Blob returns at most 5,000 names per page.
            names = [
                name
                async for name in self._container.list_blob_names(name_starts_with=prefix or None)
            ]
        return sorted(names)

    async def check(self) -> None:
        """Reach the container with the same permission every list needs (one name, one page)."""
        async with self._call(BlobOp.CHECK):
            async for _ in self._container.list_blob_names(results_per_page=1):
                break

    async def ensure_container(self) -> None:
        """Create the container if it is missing (tests and the demo; production never calls it)."""
        async with self._call(BlobOp.ENSURE_CONTAINER):
            try:
                await self._container.create_container()
            except ResourceExistsError:
                pass

    async def aclose(self) -> None:
        await self._service.close()
        if self._owned_credential is not None:
            await self._owned_credential.close()

    async def __aenter__(self) -> BlobBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _create_append_blob(blob: BlobClient) -> None:
    try:
        await blob.create_append_blob(
            content_settings=_TEXT, match_condition=MatchConditions.IfMissing, **_SEND_ONCE
        )
    except HttpResponseError as exc:
        # Another replica created it first (409, or 412 on Azure): append to theirs. Creating
        # without the condition would truncate lines they already appended.
        if exc.status_code not in (409, 412):
            raise
