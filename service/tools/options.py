"""What the tools are told by the settings (built by ``service.from_settings.tools``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class FileOptions:
    """The file tools' bounds (ENTRABOT_FILE_*): what read_file fetches and returns, what upload_file
    takes, and the size above which an upload goes through an upload session."""

    read_max_bytes: int = 2 * 1024 * 1024
    read_max_chars: int = 100_000
    upload_max_bytes: int = 20 * 1024 * 1024
    simple_upload_max_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class ToolOptions:
    auth_mode: Literal["agent_user", "delegated"]
    tenant_id: str | None
    agent_identity_id: str | None
    # send_teams_message with wait_for_reply omitted waits this long at most on a non-push host.
    send_reply_wait_s: float
    sponsor_wait_timeout_s: float
    sponsor_wait_backlog_items: int
    sponsor_wait_backlog_chars: int
    permission_relay_enabled: bool
    permission_request_timeout_s: float
    files: FileOptions = field(default_factory=FileOptions)
