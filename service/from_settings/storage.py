"""Storage's options from Settings: the backend resolution (``service.storage.resolution``) reads them."""

from __future__ import annotations

from service.config import Settings
from service.storage.options import StorageOptions


def storage_options(settings: Settings) -> StorageOptions:
    secret = settings.blob_connection_string
    return StorageOptions(
        data_dir=settings.data_dir,
        keep_memory_local=settings.keep_memory_local,
        blob_endpoint=settings.blob_endpoint,
        blob_container=settings.blob_container,
        blob_connection_string=secret.get_secret_value() if secret is not None else None,
        blob_auth=settings.blob_auth,
    )
