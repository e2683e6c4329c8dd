"""The tools' options from Settings."""

from __future__ import annotations

from service.config import Settings
from service.tools.options import FileOptions, ToolOptions


def tool_options(settings: Settings) -> ToolOptions:
    return ToolOptions(
        auth_mode=settings.auth_mode,
        tenant_id=settings.tenant_id,
        agent_identity_id=settings.agent_identity_id,
        send_reply_wait_s=settings.send_reply_wait_s,
        sponsor_wait_timeout_s=settings.sponsor_wait_timeout_s,
        sponsor_wait_backlog_items=settings.sponsor_wait_backlog_items,
        sponsor_wait_backlog_chars=settings.sponsor_wait_backlog_chars,
        permission_relay_enabled=settings.permission_relay_enabled,
        permission_request_timeout_s=settings.permission_request_timeout_s,
        files=FileOptions(
            read_max_bytes=settings.file_read_max_bytes,
            read_max_chars=settings.file_read_max_chars,
            upload_max_bytes=settings.file_upload_max_bytes,
            simple_upload_max_bytes=settings.file_simple_upload_max_bytes,
        ),
    )
