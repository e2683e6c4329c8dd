"""Which hosts are push hosts: the clientInfo name against ENTRABOT_PUSH_HOSTS."""

from __future__ import annotations

import pytest

from service.bridge.fleet_connection import PUSH_CLIENT_NAME, TOOLS_CLIENT_NAME
from service.mcp.hosts import is_push_host, parse_push_hosts
from tests.mcp.server_fixture import mcp_settings


@pytest.mark.parametrize(
    "name",
    [
        "claude-code",
        "Claude-Code",
        "CLAUDE-CODE",
        "claude-code-vscode",
        "claude-code/2.1.3",
        " claude-code ",
    ],
)
def test_a_listed_claude_code_in_any_case_and_with_a_suffix_is_a_push_host(name: str) -> None:
    assert is_push_host(name, parse_push_hosts("claude-code"))


@pytest.mark.parametrize("name", ["claude-coder", "my-claude-code", "cursor", "mcp", "", None])
def test_other_names_are_not_push_hosts(name: str | None) -> None:
    assert not is_push_host(name, parse_push_hosts("claude-code"))


def test_several_push_hosts_can_be_configured() -> None:
    hosts = parse_push_hosts(" Claude-Code , acme-agent,, ")
    assert hosts == ("claude-code", "acme-agent")
    assert is_push_host("acme-agent 3.0", hosts)
    assert not is_push_host("claude-code", parse_push_hosts(""))


def test_by_default_only_the_bridge_run_with_push_is_a_push_host() -> None:
    # Fail closed: Claude Code over HTTP may not have loaded the channel, and it drops events silently.
    default = parse_push_hosts(mcp_settings().push_hosts)
    assert is_push_host(PUSH_CLIENT_NAME, default)
    assert not is_push_host(TOOLS_CLIENT_NAME, default)
    for name in ("claude-code", "Claude-Code/2.1.80", "claude-code-vscode"):
        assert not is_push_host(name, default), name
