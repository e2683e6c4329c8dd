"""Settings of the Blob client: network behaviour, and checks of the endpoint, container and key.

Each check raises BackendMisconfiguredError with the fix, before any request is made, and never
repeats a secret (a SAS in a URL, an account key) in its message.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from azure.storage.blob.aio import LinearRetry

from service.storage.errors import BackendMisconfiguredError
from service.storage.send_once_transport import SendOnceTransport

_CONTAINER_NAME = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class BlobClientOptions:
    """Network behaviour of the SDK client.

    The SDK defaults (20 s to connect, 60 s to read, 3 retries after ~15, 18 and 24 s) keep a
    start-up check against a wrong endpoint busy for about a minute and a stuck read for four; these
    fail within seconds. Writes are never retried whatever this says (see blob.py).
    """

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    read_retries: int = 3
    read_retry_backoff_s: float = 0.5
    # A CA bundle to trust in addition to the system store (an endpoint behind a private CA).
    ca_bundle: str | None = None

    def credential_kwargs(self) -> dict[str, Any]:
        """For an azure-identity credential's own pipeline: trust the same CA bundle (an authority
        behind the private CA, as the emulator is in tests)."""
        return {"connection_verify": self.ca_bundle} if self.ca_bundle else {}

    def client_kwargs(self) -> dict[str, Any]:
        return {
            "transport": SendOnceTransport(
                connection_timeout=self.connect_timeout_s,
                read_timeout=self.read_timeout_s,
                connection_verify=self.ca_bundle or True,
            ),
            "retry_policy": LinearRetry(
                backoff=self.read_retry_backoff_s,  # type: ignore[arg-type]  # floats work; hinted int
                random_jitter_range=self.read_retry_backoff_s / 2,  # type: ignore[arg-type]
                retry_total=self.read_retries,
            ),
        }


def public_endpoint(url: str) -> str:
    """``url`` without query, fragment or user info: safe to log even when it carried a SAS."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


def parse_endpoint(endpoint: str, *, require_https: bool) -> str:
    """Validate a Blob account URL; raise BackendMisconfiguredError with the fix when it is unusable."""
    try:
        parts = urlsplit(endpoint.strip())
        parts.port  # noqa: B018 - raises ValueError on a non-numeric port
    except ValueError:
        raise BackendMisconfiguredError(
            "ENTRABOT_BLOB_ENDPOINT is not a URL; expected e.g. https://<account>.blob.core.windows.net"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendMisconfiguredError(
            "ENTRABOT_BLOB_ENDPOINT is not an http(s) URL; expected e.g. https://<account>.blob.core.windows.net"
        )
    if parts.query or parts.username or parts.password:
        raise BackendMisconfiguredError(
            "ENTRABOT_BLOB_ENDPOINT must be a plain account URL without a query string or user info "
            "(no SAS tokens or keys in it); put credentials in ENTRABOT_BLOB_CONNECTION_STRING"
        )
    if require_https and parts.scheme != "https":
        raise BackendMisconfiguredError(
            f"ENTRABOT_BLOB_ENDPOINT {public_endpoint(endpoint)} uses http, but token authentication "
            "needs https; use an https endpoint, or ENTRABOT_BLOB_CONNECTION_STRING for Azurite"
        )
    return endpoint.strip()


def validate_container_name(container: str) -> str:
    if not _CONTAINER_NAME.match(container):
        raise BackendMisconfiguredError(
            f"ENTRABOT_BLOB_CONTAINER {container!r} is not a valid container name: use 3-63 lowercase "
            "letters, digits and single hyphens, starting and ending with a letter or digit"
        )
    return container


def account_key_is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except binascii.Error:
        return False
    return True
