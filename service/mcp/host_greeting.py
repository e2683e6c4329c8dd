"""What /mcp tells a host as it connects: the channel capability and the instructions, by host kind.

Only a push host is pushed to: a handshake-era session whose ``clientInfo.name`` is a push host
(``hosts``). So only its initialize result declares ``claude/channel`` (and
``claude/channel/permission`` while the permission relay is registered) and carries the push
instructions; a host that declared the channel but never got an event would wait for one.

Every other host gets no channel capability and the inbox instructions: a handshake-era host with
another name, and every 2026-07-28 request, which has no session and so no push stream. The SDK
answers ``server/discover`` and a non-push host's initialize from the low-level server's own
``instructions`` and ``get_capabilities``, so the server is built with the inbox text and declares no
channel, and only a push host's initialize result is changed here.
"""

from __future__ import annotations

from typing import Any

from service.mcp.sdk_adapter import CHANNEL_CAPABILITY, PERMISSION_CAPABILITY


def greet_push_host(
    result: dict[str, Any], *, instructions: str | None, relays_permissions: bool
) -> dict[str, Any]:
    """A push host's initialize result (the wire dict): the channel declared, the push instructions."""
    capabilities = dict(result.get("capabilities") or {})
    experimental = {**(capabilities.get("experimental") or {}), CHANNEL_CAPABILITY: {}}
    if relays_permissions:
        experimental[PERMISSION_CAPABILITY] = {}
    greeted = {**result, "capabilities": {**capabilities, "experimental": experimental}}
    if instructions is not None:
        greeted["instructions"] = instructions
    return greeted
