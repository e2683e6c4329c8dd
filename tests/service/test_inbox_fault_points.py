"""A replica SIGKILLed right after writing a claim's intent for an inbox host, or right after the claim
itself, loses nothing: the message reaches the inbox host's next calls exactly once, through the other
replica (issue 35).

Two replica processes on Azurite and the Graph emulator. The inbox host calls the first replica, which
is told by ``ENTRABOT_TEST_KILL_AT`` to kill itself at the fault point the first time it has a message
to write into a host's record; the host then calls the second replica with the cursor it had.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inbox_host import InboxLoop

from service.delivery.fault_points import FaultPoint
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN
from service.domain.message import MessageKey
from tests.bridge.fleet_stack import arm_fault_point, bridge_fleet, killed_at_fault_point
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

SETTLE_S = 8.0  # a repeat through the second replica's next calls would show by now


@pytest.mark.timeout(240)
@pytest.mark.parametrize("point", [FaultPoint.AFTER_INTENT, FaultPoint.AFTER_CLAIM])
async def test_a_replica_killed_at_a_fault_point_loses_nothing_for_an_inbox_host(
    azurite: Azurite, tmp_path: Path, point: FaultPoint
) -> None:
    env = {
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
        "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
        "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
    }
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=2, chats=2, env=env) as stack:
        first, second = stack.fleet.members
        await arm_fault_point(first, point)
        # The host's calls go to the first replica while it lives, then to the second.
        host = InboxLoop(
            lambda: first.mcp_url if first.alive else second.mcp_url, DEV_TOKEN, host_id="codex"
        )
        loop = asyncio.create_task(host.run())
        try:
            await stack.wait_bootstrapped()
            await eventually(lambda: host.calls > 0, "the inbox host's first call")
            chat_id, members = stack.chats()[0]
            sender = stack.seed.find_user(members[0])
            assert sender is not None
            posted = await stack.traffic.post_chat(sender, chat_id, f"pay this ({point.value})")
            await killed_at_fault_point(first, point)
            key = MessageKey(chat_id, posted.message_id)
            await eventually(
                lambda: key in host.received,
                "the message in an inbox call's result, through the second replica",
                timeout_s=60,
            )
            await asyncio.sleep(SETTLE_S)
            assert host.counts()[key] == 1, host.received
            assert second.alive and host.failures >= 1  # it did lose its replica
        finally:
            host.stop()
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
