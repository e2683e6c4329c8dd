"""Allowed Host and Origin headers from the settings."""

from __future__ import annotations

from service.mcp.transport_security import transport_security_settings
from tests.mcp.server_fixture import mcp_settings


def test_a_host_without_a_port_is_allowed_on_any_port() -> None:
    security = transport_security_settings(
        mcp_settings(mcp_allowed_hosts="agent.example.com, 127.0.0.1:8080, ::1")
    )
    assert security.enable_dns_rebinding_protection
    assert security.allowed_hosts == [
        "agent.example.com",
        "agent.example.com:*",
        "127.0.0.1:8080",
        "[::1]",
        "[::1]:*",
    ]


def test_origins_are_taken_as_written() -> None:
    origins = "https://app.example.com,http://localhost:*"
    security = transport_security_settings(mcp_settings(mcp_allowed_origins=origins))
    assert security.allowed_origins == ["https://app.example.com", "http://localhost:*"]
    assert transport_security_settings(mcp_settings()).allowed_origins == []
