"""What the tools are told by the settings (built by ``service.from_settings.tools``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
