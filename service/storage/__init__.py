"""Where the fleet's shared operational state lives: the MemoryBackend protocol and its backends."""

from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.blob_config import BlobClientOptions
from service.storage.errors import (
    BackendMisconfiguredError,
    BackendUnavailableError,
    ConcurrencyError,
    StorageError,
    TokenExpiredError,
    TransientStorageError,
)
from service.storage.keys import InvalidKeyError
from service.storage.local import LocalBackend
from service.storage.resolution import assert_backend_config, get_backend, local_process_lock_path
from service.storage.token_credential import TokenProvider

__all__ = [
    "MemoryBackend",
    "LocalBackend",
    "BlobBackend",
    "BlobClientOptions",
    "TokenProvider",
    "get_backend",
    "assert_backend_config",
    "local_process_lock_path",
    "StorageError",
    "ConcurrencyError",
    "TokenExpiredError",
    "BackendMisconfiguredError",
    "TransientStorageError",
    "BackendUnavailableError",
    "InvalidKeyError",
]
