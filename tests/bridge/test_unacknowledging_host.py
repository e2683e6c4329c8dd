"""A host that names itself and never acknowledges is pushed a message twice (once more after the bound),
then no more; the message stays owed in its record, ``catch_up`` lists it, and an acknowledgement settles it.

A real replica process (Azurite, the Graph emulator); the host is the MCP Python SDK's client over
streamable HTTP, introducing itself as the push bridge and sending ``X-Entrabot-Host-Id``, as the bridge
does, but never ``notifications/entrabot/delivered`` until the end.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from service.bridge.sdk_adapter import send_client_notification
from service.delivery.host_record import parse_host_record, record_key
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN
from service.mcp.acknowledging import ACK_METHOD, HOST_ID_HEADER
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from tests.bridge.fleet_stack import bridge_fleet
from tests.mcp.server_fixture import ChannelListener, eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

BOUND_S = 2.0
WATCH_S = 5 * BOUND_S  # several bounds: a third push would have come by then
HOST = "never-acks"


@pytest.mark.timeout(180)
async def test_a_host_that_never_acknowledges_is_pushed_twice_and_the_message_stays_owed(
    azurite: Azurite, tmp_path: Path
) -> None:
    env = {
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
        "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
        "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
        "ENTRABOT_DELIVERY_REDELIVER_AFTER_S": str(BOUND_S),
    }
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2, env=env) as stack:
        backend = BlobBackend.from_connection_string(
            azurite.connection_string, stack.fleet.container, metrics=StorageMetrics()
        )
        listener = ChannelListener()
        headers = {"Authorization": f"Bearer {DEV_TOKEN}", HOST_ID_HEADER: HOST}
        async with httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30, read=300)
        ) as http:
            client = Client(
                streamable_http_client(stack.fleet.members[0].mcp_url, http_client=http),
                mode="legacy",
                extensions=[listener],
                client_info=Implementation(name=BRIDGE_PUSH_CLIENT_NAME, version="test"),
            )
            async with client:
                await stack.wait_bootstrapped()
                chat_id, members = stack.chats()[0]
                sender = stack.seed.find_user(members[0])
                assert sender is not None
                posted = await stack.traffic.post_chat(sender, chat_id, "pay this invoice")

                def pushes() -> int:
                    return listener.message_ids().count(posted.message_id)

                await eventually(
                    lambda: pushes() == 2, "the push and its one redelivery", timeout_s=60
                )
                await asyncio.sleep(WATCH_S)
                assert pushes() == 2, "redelivered once, not again and again"

                record = parse_host_record(await backend.read_text(record_key(HOST)) or "{}")
                assert [e.key for e in record.pending] == [(chat_id, posted.message_id)]
                assert record.held_by is not None and record.held_by.active

                result = await client.call_tool("catch_up", {"hours": 1})
                assert not result.is_error
                listed = json.dumps(result.structured_content)
                assert posted.message_id in listed, "catch_up lists what the host may have missed"

                await send_client_notification(
                    client, ACK_METHOD, {"keys": [[chat_id, posted.message_id]]}
                )

                async def settled() -> bool:
                    stored = parse_host_record(await backend.read_text(record_key(HOST)) or "{}")
                    return stored.pending == () and (chat_id, posted.message_id) in stored.acked

                deadline = asyncio.get_running_loop().time() + 30
                while not await settled():
                    assert asyncio.get_running_loop().time() < deadline, (
                        "the acknowledgement never reached the record"
                    )
                    await asyncio.sleep(0.2)
                await asyncio.sleep(WATCH_S)
                assert pushes() == 2, "nothing acknowledged is pushed again"
        await backend.aclose()
