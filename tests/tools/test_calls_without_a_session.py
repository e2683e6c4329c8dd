"""Tool calls with no MCP session, as every MCP 2026-07-28 call is (``ToolCall.session`` None).

A tool whose answer depends on the session says so as a tool error naming what to do instead; the
others work as for any host that takes no pushes.
"""

from __future__ import annotations

from tests.tools.test_sponsor_wait_takes_one import bootstrap_every_chat
from tests.tools.tool_world import RecordingPushTarget, ToolWorld


async def test_watch_teams_replies_needs_a_session_and_names_the_read_to_use(
    world: ToolWorld,
) -> None:
    await world.inject(world.chat(1), "Grace", "a reply")
    text = await world.error("watch_teams_replies", {"chat_id": world.chat(1)}, session_id=None)
    assert "per MCP session" in text and "read_teams_messages" in text
    read = await world.ok("read_teams_messages", {"chat_id": world.chat(1)}, session_id=None)
    assert read["count"] == 1


async def test_catch_up_reads_everything_but_this_sessions_share_without_a_session(
    world: ToolWorld,
) -> None:
    await bootstrap_every_chat(world)
    world.hub.register(RecordingPushTarget(target_id="push:another-session"))
    message = await world.inject(world.chat(1), "Grace", "for whoever holds the chat")
    await world.poller.cycle()
    text = await world.error("catch_up", {"this_session_only": True}, session_id=None)
    assert "this_session_only needs an MCP session" in text
    everything = await world.ok("catch_up", {}, session_id=None)
    assert [m["message_id"] for m in everything["messages"]] == [message]


async def test_a_send_without_a_session_is_audited_with_no_host_or_session(
    world: ToolWorld,
) -> None:
    sent = await world.ok(
        "send_teams_message",
        {"chat_id": world.chat(1), "text": "hello", "wait_for_reply": False},
        session_id=None,
    )
    assert sent["interaction_logged"] is True
    [record] = (await world.ok("read_interactions", {"direction": "out"}))["records"]
    assert (record["action"], record.get("host"), record.get("session")) == ("sent", None, None)
