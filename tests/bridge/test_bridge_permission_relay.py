"""Permission relay end to end: a host behind the real bridge asks, the sponsor answers in Teams.

The host (the official Python SDK's stdio client) sends ``notifications/claude/channel/permission_request``
to the bridge, which asks a real replica; the replica DMs the sponsor through the Graph emulator. The
sponsor's "yes <id>" comes back as an allow verdict for that id, "no <id>" as a deny; a stranger's
"yes <id>" and a wrong id decide nothing (they arrive as the ordinary messages they are).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN
from tests.bridge.bridge_host import Received, bridge_host
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

WAIT_S = 60.0


class _Notification(BaseModel):
    method: str
    params: dict[str, Any]


def _ordinary(received: Received) -> set[str]:
    return set(received.message_ids())


async def _sponsor_dm(stack: BridgeFleet, request_id: str) -> str:
    """The chat where the agent asked the sponsor about ``request_id``, as the sponsor sees it."""
    sponsor = stack.seed.sponsors[0]
    listing = await stack.traffic._graph("GET", "/me/chats?$expand=lastMessagePreview", sponsor)
    for chat in listing.json()["value"]:
        preview = (chat.get("lastMessagePreview") or {}).get("body") or {}
        if request_id in (preview.get("content") or ""):
            return str(chat["id"])
    raise AssertionError(f"no chat with the sponsor carries request {request_id}")


@pytest.mark.timeout(300)
async def test_a_sponsors_yes_and_no_in_teams_come_back_through_the_bridge_as_verdicts(
    azurite: Azurite, tmp_path: Path
) -> None:
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2) as stack:
        async with bridge_host(
            stack.balancer.url(),
            tmp_path / "bridge.log",
            token=DEV_TOKEN,
            args=("--push", "--permission-relay"),
        ) as (client, received):
            await stack.wait_bootstrapped()
            ask = {
                "request_id": "abcde",
                "tool_name": "Bash",
                "description": "Run the test suite",
                "input_preview": "make test",
            }
            await client.session.send_notification(
                _Notification(method="notifications/claude/channel/permission_request", params=ask)  # type: ignore[arg-type]
            )
            sponsor = stack.seed.sponsors[0]
            stranger = next(h for h in stack.seed.humans if h.id != sponsor.id)
            dm = None

            async def asked() -> bool:
                nonlocal dm
                try:
                    dm = await _sponsor_dm(stack, "abcde")
                except AssertionError:
                    return False
                return True

            for _ in range(int(WAIT_S * 2)):
                if await asked():
                    break
                await asyncio.sleep(0.5)
            assert dm is not None, "the sponsor was never asked"
            stranger_chat = next(c for c, members in stack.chats() if stranger.id in members)

            not_the_sponsor = await stack.traffic.post_chat(stranger, stranger_chat, "yes abcde")
            wrong_id = await stack.traffic.post_chat(sponsor, dm, "yes qwxyz")
            await eventually(
                lambda: {not_the_sponsor.message_id, wrong_id.message_id} <= _ordinary(received),
                "the stranger's and the wrong id's replies as ordinary pushes",
                timeout_s=WAIT_S,
            )
            assert received.verdicts == []

            allow = await stack.traffic.post_chat(sponsor, dm, "yes abcde")
            await eventually(lambda: received.verdicts, "the allow verdict", timeout_s=WAIT_S)
            assert received.verdicts == [{"request_id": "abcde", "behavior": "allow"}]

            await client.session.send_notification(
                _Notification(  # type: ignore[arg-type]
                    method="notifications/claude/channel/permission_request",
                    params={
                        "request_id": "fghij",
                        "tool_name": "Write",
                        "description": "Edit a file",
                        "input_preview": "README.md",
                    },
                )
            )
            for _ in range(int(WAIT_S * 2)):
                try:
                    await _sponsor_dm(stack, "fghij")
                    break
                except AssertionError:
                    await asyncio.sleep(0.5)
            deny = await stack.traffic.post_chat(sponsor, dm, "no fghij")
            await eventually(
                lambda: len(received.verdicts) == 2, "the deny verdict", timeout_s=WAIT_S
            )
            assert received.verdicts[1] == {"request_id": "fghij", "behavior": "deny"}
            assert allow.message_id not in _ordinary(received) and deny.message_id not in _ordinary(
                received
            )
