"""A replica SIGKILLed right after writing a claim's intent, or right after the claim itself, loses nothing:
the message reaches the bridge's host exactly once, through the other replica (issue 22).

Two replica processes on Azurite and the Graph emulator behind the loopback balancer; the bridge's session
is on the first, which is told by ``ENTRABOT_TEST_KILL_AT`` to kill itself at the fault point the first
time it has a message owed to an acknowledging host.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.delivery.fault_points import FaultPoint
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN
from tests.bridge.bridge_host import bridge_host
from tests.bridge.fleet_stack import arm_fault_point, bridge_fleet, killed_at_fault_point
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

SETTLE_S = (
    8.0  # longer than a redelivery to the same session would take to show (the bound is 2 s here)
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("point", [FaultPoint.AFTER_INTENT, FaultPoint.AFTER_CLAIM])
async def test_a_replica_killed_at_a_fault_point_loses_nothing_and_duplicates_nothing(
    azurite: Azurite, tmp_path: Path, point: FaultPoint
) -> None:
    env = {
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
        "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
        "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
        "ENTRABOT_DELIVERY_REDELIVER_AFTER_S": "2",
    }
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=2, chats=2, env=env) as stack:
        first, second = stack.fleet.members
        # The first replica, which the balancer gives the bridge, dies at the fault point.
        await arm_fault_point(first, point)
        async with bridge_host(stack.balancer.url(), tmp_path / "bridge.log", token=DEV_TOKEN) as (
            _,
            received,
        ):
            await stack.wait_bootstrapped()
            await eventually(
                lambda: first.port in stack.balancer.routed,
                "the bridge's session on the first replica",
            )
            chat_id, members = stack.chats()[0]
            sender = stack.seed.find_user(members[0])
            assert sender is not None
            posted = await stack.traffic.post_chat(sender, chat_id, f"ship it ({point.value})")
            await killed_at_fault_point(first, point)
            await eventually(
                lambda: posted.message_id in received.message_ids(),
                "the message on the host's stdin, through the second replica",
                timeout_s=60,
            )
            await asyncio.sleep(SETTLE_S)
            assert received.message_ids().count(posted.message_id) == 1, received.message_ids()
            assert second.alive
            ledger = await stack.ledger.snapshot()
            cursor = ledger.chat_cursors[chat_id]
            assert cursor.is_recorded(posted.message_id)
