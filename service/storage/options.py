"""What storage is told by the settings: where the state lives and how Blob is reached.

Built from ``Settings`` by the composition root (``service.from_settings.storage``); the ENTRABOT_*
names each field comes from are the ones ``service.storage.resolution``'s messages say to set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class StorageOptions:
    data_dir: Path  # ENTRABOT_DATA_DIR: the local state directory
    keep_memory_local: bool = False
    blob_endpoint: str | None = None
    blob_container: str | None = None
    # Azurite and dev only; in AKS the workload identity (DefaultAzureCredential) is used.
    blob_connection_string: str | None = field(default=None, repr=False)
    blob_auth: Literal["auto", "connection_string", "default_credential", "agent_user"] = "auto"
