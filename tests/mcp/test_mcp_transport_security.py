"""Allowed Host and Origin headers from the settings."""

from __future__ import annotations

from mcp.server.transport_security import TransportSecuritySettings

from service.config import Settings
from service.from_settings.mcp import mcp_options
from service.mcp.transport_security import transport_security_settings
from tests.mcp.server_fixture import mcp_settings


def security_of(settings: Settings) -> TransportSecuritySettings:
    options = mcp_options(settings)
    return transport_security_settings(options.allowed_hosts, options.allowed_origins)


def test_a_host_without_a_port_is_allowed_on_any_port() -> None:
    security = security_of(mcp_settings(mcp_allowed_hosts="agent.example.com, 127.0.0.1:8080, ::1"))
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
    security = security_of(mcp_settings(mcp_allowed_origins=origins))
    assert security.allowed_origins == ["https://app.example.com", "http://localhost:*"]
    assert security_of(mcp_settings()).allowed_origins == []
