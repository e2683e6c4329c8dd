"""Which MemoryBackend this process uses, decided from the ``StorageOptions`` it is given.

``choose_backend`` is the decision (pure, over the options); ``get_backend`` builds the backend it
names without creating or writing anything; ``assert_backend_config`` is the start-up gate that
reaches the store once and logs where the state lives; ``create_container_if_missing`` is the one
thing that creates, and only when an operator asked (``--create-container``). A half-configured cloud environment fails
here, loudly, instead of quietly starting over on an empty local store. Nothing here reads the
environment: a container named only in ``.env`` is seen exactly as one named in the environment.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.blob_config import (
    BlobClientOptions,
    parse_endpoint,
    public_endpoint,
    validate_container_name,
)
from service.storage.errors import BackendMisconfiguredError, BackendUnavailableError
from service.storage.local import PROCESS_LOCK_FILE, LocalBackend
from service.storage.options import StorageOptions
from service.storage.token_credential import TokenProvider
from service.telemetry.metrics import StorageMetrics

# The environment names, for error messages that say what to set.
KEEP_LOCAL = "ENTRABOT_KEEP_MEMORY_LOCAL"
ENDPOINT = "ENTRABOT_BLOB_ENDPOINT"
CONTAINER = "ENTRABOT_BLOB_CONTAINER"
CONNECTION_STRING = "ENTRABOT_BLOB_CONNECTION_STRING"
AUTH = "ENTRABOT_BLOB_AUTH"

_log = logging.getLogger(__name__)


class BlobAuth(Enum):
    CONNECTION_STRING = "connection_string"  # Azurite and development
    DEFAULT_CREDENTIAL = "default_credential"  # AKS workload identity
    AGENT_USER = "agent_user"  # the three-hop agent-user storage token


@dataclass(frozen=True)
class LocalChoice:
    root: Path


@dataclass(frozen=True)
class BlobChoice:
    endpoint: str
    container: str
    auth: BlobAuth
    connection_string: str | None = field(default=None, repr=False)


def data_dir(storage: StorageOptions) -> Path:
    """The local state directory: ENTRABOT_DATA_DIR, else ~/.entrabot/data."""
    return storage.data_dir.expanduser()


def local_process_lock_path(storage: StorageOptions) -> Path:
    """The per-machine process lock; it stays local whatever backend holds the shared state."""
    return data_dir(storage) / PROCESS_LOCK_FILE


def choose_backend(storage: StorageOptions) -> LocalChoice | BlobChoice:
    """Decide the backend from the options alone; raise BackendMisconfiguredError naming the fix."""
    if storage.keep_memory_local:
        return LocalChoice(data_dir(storage))
    endpoint, container = storage.blob_endpoint, storage.blob_container
    connection_string = storage.blob_connection_string
    if endpoint is None and container is None:
        if connection_string is not None:
            raise BackendMisconfiguredError(
                f"{CONNECTION_STRING} is set but {ENDPOINT} and {CONTAINER} are not; set both to use "
                f"Blob storage, or unset it, or set {KEEP_LOCAL}=true"
            )
        return LocalChoice(data_dir(storage))
    if endpoint is None or container is None:
        present, missing = (ENDPOINT, CONTAINER) if container is None else (CONTAINER, ENDPOINT)
        raise BackendMisconfiguredError(
            f"{present} is set but {missing} is not; set both, or set {KEEP_LOCAL}=true"
        )
    validate_container_name(container)
    auth = _blob_auth(storage, connection_string)
    parse_endpoint(endpoint, require_https=auth is not BlobAuth.CONNECTION_STRING)
    return BlobChoice(
        endpoint, container, auth, connection_string if auth is BlobAuth.CONNECTION_STRING else None
    )


def _blob_auth(storage: StorageOptions, connection_string: str | None) -> BlobAuth:
    if storage.blob_auth == "auto":
        return BlobAuth.CONNECTION_STRING if connection_string else BlobAuth.DEFAULT_CREDENTIAL
    auth = BlobAuth(storage.blob_auth)  # Settings already refused anything outside the enum
    if auth is BlobAuth.CONNECTION_STRING and connection_string is None:
        raise BackendMisconfiguredError(
            f"{AUTH}=connection_string but {CONNECTION_STRING} is not set; set it"
        )
    return auth


def get_backend(
    storage: StorageOptions,
    *,
    metrics: StorageMetrics,
    storage_token_provider: TokenProvider | None = None,
    options: BlobClientOptions = BlobClientOptions(),
) -> MemoryBackend:
    """The backend the options name. Creates nothing."""
    choice = choose_backend(storage)
    if isinstance(choice, LocalChoice):
        return LocalBackend(choice.root)
    if choice.auth is BlobAuth.CONNECTION_STRING:
        assert choice.connection_string is not None
        backend = BlobBackend.from_connection_string(
            choice.connection_string, choice.container, options=options, metrics=metrics
        )
        if backend.endpoint != public_endpoint(choice.endpoint):
            raise BackendMisconfiguredError(
                f"{ENDPOINT} is {public_endpoint(choice.endpoint)} but {CONNECTION_STRING} points at "
                f"{backend.endpoint}; make them name the same endpoint"
            )
        return backend
    if choice.auth is BlobAuth.AGENT_USER:
        if storage_token_provider is None:
            raise BackendMisconfiguredError(
                f"{AUTH}=agent_user but no agent-user storage token provider was wired in; configure the "
                f"agent-user identity, or use {AUTH}=default_credential"
            )
        return BlobBackend.from_token_provider(
            choice.endpoint,
            choice.container,
            storage_token_provider,
            options=options,
            metrics=metrics,
        )
    from azure.identity.aio import DefaultAzureCredential  # ~0.4 s import only replicas on AKS pay

    return BlobBackend.from_credential(
        choice.endpoint,
        choice.container,
        DefaultAzureCredential(**options.credential_kwargs()),
        close_credential=True,
        options=options,
        metrics=metrics,
    )


async def assert_backend_config(
    storage: StorageOptions,
    *,
    metrics: StorageMetrics,
    storage_token_provider: TokenProvider | None = None,
    logger: logging.Logger | None = None,
    options: BlobClientOptions = BlobClientOptions(),
) -> MemoryBackend:
    """Resolve the backend, reach it once, log where the state lives, and return it.

    Runs before any worker starts, so a misconfigured replica starts nothing.
    """
    backend = get_backend(
        storage, storage_token_provider=storage_token_provider, metrics=metrics, options=options
    )
    try:
        await backend.check()
    except BaseException:
        await backend.aclose()
        raise
    (logger or _log).info("storage backend: %s", backend.describe())
    return backend


async def create_container_if_missing(backend: MemoryBackend) -> bool:
    """Create the Blob container ``backend`` names when it does not exist; True when it created it.

    A local store has nothing to create (its directory is made on first write). An endpoint that
    does not answer fails the create with the same error the check would have given.
    """
    if not isinstance(backend, BlobBackend):
        return False
    try:
        await backend.check()
    except BackendUnavailableError:
        await backend.ensure_container()
        return True
    return False
