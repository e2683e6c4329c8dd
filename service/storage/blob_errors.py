"""How an Azure SDK failure becomes one of our StorageErrors: a pure decision over the exception.

The same status means different things on different paths (409 on a create is a lost race, 409 on
an append is a wrong blob type), so the caller says which operation failed. 401 is decided first:
whatever else the answer says, the credential has to be refreshed before anything can succeed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import aiohttp
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
)

from service.storage.errors import (
    BackendMisconfiguredError,
    BackendUnavailableError,
    ConcurrencyError,
    NotAppendableError,
    StorageError,
    TokenExpiredError,
    TransientStorageError,
)

BLOB_NOT_FOUND = "BlobNotFound"
CONTAINER_NOT_FOUND = "ContainerNotFound"
AUTHENTICATION_FAILED = "AuthenticationFailed"
INVALID_BLOB_TYPE = "InvalidBlobType"
_RETRYABLE_STATUSES = frozenset({408, 429})


class BlobOp(Enum):
    """Which call failed; decides what a 404, 409 or 412 means."""

    READ = "read"
    EXISTS = "exists"
    LIST = "list"
    CHECK = "check"
    CREATE = "create"  # write_text(if_absent=True): If-None-Match: *
    IF_MATCH = "if_match"  # write_text(if_match=etag)
    OVERWRITE = "overwrite"  # unconditional write_text
    APPEND = "append"
    ENSURE_CONTAINER = "ensure_container"

    @property
    def is_write(self) -> bool:
        return self in (BlobOp.CREATE, BlobOp.IF_MATCH, BlobOp.OVERWRITE, BlobOp.APPEND)


@dataclass(frozen=True)
class BlobTarget:
    """Where the failed call went; the parts of a message that name the place (never a secret)."""

    endpoint: str
    container: str
    key: str | None = None
    bearer: bool = False  # the client authenticates with a token (not a shared key or SAS)

    def subject(self, op: BlobOp) -> str:
        return f"{op.value} of {self.key!r}" if self.key is not None else op.value


def error_code(exc: HttpResponseError) -> str | None:
    """The storage error code (``BlobNotFound``, ``ConditionNotMet`` ...) as a plain string."""
    code = getattr(exc, "error_code", None)
    if code is None and exc.response is not None:
        # azure-core types ``response`` as a protocol without ``headers``; every transport's response has them.
        headers = getattr(exc.response, "headers", None)
        code = headers.get("x-ms-error-code") if headers is not None else None
    return None if code is None else str(getattr(code, "value", code))


def is_blob_not_found(exc: AzureError) -> bool:
    """A 404 about the blob itself; a missing container is not an absent key."""
    return (
        isinstance(exc, HttpResponseError)
        and exc.status_code == 404
        and error_code(exc) != CONTAINER_NOT_FOUND
    )


def storage_error_from(exc: AzureError, op: BlobOp, target: BlobTarget) -> StorageError:
    """The StorageError that callers see for an SDK failure of ``op`` on ``target``."""
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    subject = target.subject(op)
    if status == 401:
        return TokenExpiredError(
            f"Blob endpoint {target.endpoint} answered 401 to the {subject}: the storage token "
            "expired or was rejected; refresh it and retry"
        )
    if status is not None:
        return _from_status(exc, status, op, target)  # type: ignore[arg-type]
    if isinstance(exc, ClientAuthenticationError):
        # Raised by a credential before any request went out (no HTTP status).
        return TokenExpiredError(
            f"could not get a storage token for {target.endpoint} ({type(exc).__name__}); check the "
            "workload identity or agent-user configuration, then retry"
        )
    if isinstance(exc, ServiceRequestTimeoutError):
        return TransientStorageError(
            f"connecting to {target.endpoint} timed out during the {subject}"
        )
    if isinstance(exc, ServiceRequestError) and isinstance(
        exc.inner_exception, aiohttp.ClientConnectorError
    ):
        # The connection was never established, so nothing was sent (refused, unknown host, TLS).
        return BackendUnavailableError(
            f"cannot reach Blob endpoint {target.endpoint}: {exc.inner_exception}; check "
            "ENTRABOT_BLOB_ENDPOINT and that the storage account is reachable from here"
        )
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        # aiohttp reports a connection dropped mid-response as a ServiceRequestError too, so
        # anything but a failed connect may have reached the service.
        return TransientStorageError(
            _unknown_outcome(f"{type(exc).__name__} from {target.endpoint}", op, subject)
        )
    return StorageError(f"the {subject} at {target.endpoint} failed: {type(exc).__name__}")


def _from_status(
    exc: HttpResponseError, status: int, op: BlobOp, target: BlobTarget
) -> StorageError:
    code = error_code(exc)
    subject = target.subject(op)
    if code == CONTAINER_NOT_FOUND or (status == 404 and op in (BlobOp.CHECK, BlobOp.LIST)):
        return BackendUnavailableError(
            f"container {target.container!r} does not exist at {target.endpoint}; create it "
            "(`entrabot-fleet serve --create-container` or `doctor --create-container` does), or fix "
            "ENTRABOT_BLOB_CONTAINER"
        )
    if op is BlobOp.CREATE and status in (409, 412):
        return ConcurrencyError(f"{target.key!r} already exists (HTTP {status} {code})")
    # Azure answers 404 to If-Match on a missing blob, Azurite 412: both mean the ETag is gone.
    if op is BlobOp.IF_MATCH and status in (404, 412):
        return ConcurrencyError(f"{target.key!r}: ETag no longer matches (HTTP {status} {code})")
    if op is BlobOp.APPEND and code == INVALID_BLOB_TYPE:
        # The known causes: the single-host system, and `migrate` before it kept logs append blobs.
        return NotAppendableError(
            f"{target.key!r} is a block blob, not an append blob, so nothing can be appended to it (the "
            "single-host system and older versions of `entrabot-fleet migrate` wrote logs whole); running "
            "`entrabot-fleet migrate` with the local copy recreates it as an append blob"
        )
    if status == 403 and code == AUTHENTICATION_FAILED and target.bearer:
        # Azure answers a refused token (expired, wrong audience or issuer) with 401; Azurite's OAuth
        # with 403 AuthenticationFailed ("Lifetime validation failed. The token is expired."). Without
        # a shared key in play, either way the token must be refreshed; an identity that lacks its
        # role gets 403 AuthorizationPermissionMismatch, which stays a configuration error below.
        return TokenExpiredError(
            f"Blob endpoint {target.endpoint} refused the storage token for the {subject} (HTTP 403 {code}): "
            "it expired or was rejected; refresh it and retry"
        )
    if status == 403:
        return BackendMisconfiguredError(
            f"Blob endpoint {target.endpoint} refused the {subject} (HTTP 403 {code}): check the account "
            f"key, or that the identity holds 'Storage Blob Data Contributor' on container {target.container!r}"
        )
    if status in _RETRYABLE_STATUSES or status >= 500:
        return TransientStorageError(
            _unknown_outcome(f"HTTP {status} {code} from {target.endpoint}", op, subject)
        )
    return StorageError(f"the {subject} at {target.endpoint} failed: HTTP {status} {code}")


def _unknown_outcome(cause: str, op: BlobOp, subject: str) -> str:
    if op.is_write:
        return f"{cause} during the {subject}: the write may or may not have committed; read back to settle"
    return f"{cause} during the {subject}; retry later"
