"""A sponsor wait takes one message, so a replica whose only target is a wait claims one.

Two sponsor messages arrive while a non-push host waits (in one chat, or in two chats polled in the
same cycle): the wait gets the older one, and the other stays unclaimed in Graph until a target that
can take it exists: a push host connected later, or the host's next wait. Real tool calls, the
emulator over HTTP, the ledger on a LocalBackend; the test drives the chat poll's cycles.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tool_results import result_text

from service.domain.conversation import TEAMS_CHATS
from tests.tools.tool_world import RecordingPushTarget, ToolWorld

SAME_CHAT = (0, 0)
TWO_CHATS = (0, 1)  # Ada's oneOnOne, then the group chat with Ada and Grace


async def bootstrap_every_chat(world: ToolWorld) -> None:
    """First sight of every watched chat while a host is briefly connected, so what Ada writes next is
    new to the fleet (a first sight would surface only a chat's newest message)."""
    bootstrapper = RecordingPushTarget(target_id="push:bootstrap")
    world.hub.register(bootstrapper)
    await world.poller.cycle()
    await world.poller.cycle()
    world.hub.unregister(bootstrapper.target_id)
    for index in range(len(world.seed.chats)):
        assert await world.backend.read_text(TEAMS_CHATS.cursor_key(world.chat(index))) is not None
    assert bootstrapper.received == []


async def ada_writes_twice(world: ToolWorld, chats: tuple[int, int]) -> list[str]:
    """Two sponsor messages, oldest first, written while no target is connected (so no cycle claims
    anything in between: the next cycle sees both)."""
    return [
        await world.inject(world.chat(chats[0]), "Ada", "First: ship it."),
        await world.inject(world.chat(chats[1]), "Ada", "Second: and tag the release."),
    ]


async def wait_once(world: ToolWorld, session_id: str) -> dict[str, Any]:
    task = asyncio.create_task(
        world.call("wait_for_sponsor_dm", {"timeout_s": 30}, session_id=session_id)
    )
    await world.until_waiting()
    await world.poller.cycle()
    result = await asyncio.wait_for(task, timeout=15)
    assert not result.is_error, result_text(result)
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.parametrize("chats", [SAME_CHAT, TWO_CHATS], ids=["same-chat", "two-chats"])
async def test_a_wait_gets_the_first_and_a_push_host_connected_later_gets_the_second(
    world: ToolWorld, chats
):
    await bootstrap_every_chat(world)
    first, second = await ada_writes_twice(world, chats)
    out = await wait_once(world, "non-push")
    assert out["outcome"] == "reply" and out["sponsor_reply"]["message_id"] == first
    assert world.hub.live_targets() == []

    push = RecordingPushTarget()
    world.hub.register(push)
    await world.poller.cycle()
    await world.poller.cycle()
    assert [m.message_id for m in push.received] == [second]


@pytest.mark.parametrize("chats", [SAME_CHAT, TWO_CHATS], ids=["same-chat", "two-chats"])
async def test_a_wait_gets_the_first_and_the_next_wait_gets_the_second(world: ToolWorld, chats):
    await bootstrap_every_chat(world)
    first, second = await ada_writes_twice(world, chats)
    assert (await wait_once(world, "non-push"))["sponsor_reply"]["message_id"] == first
    assert (await wait_once(world, "non-push"))["sponsor_reply"]["message_id"] == second
