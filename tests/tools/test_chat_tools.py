"""create_chat and list_watched_chats: where chat ids come from."""

from __future__ import annotations

from pathlib import Path

from emulator.server import RunningEmulator
from service.domain.conversation import TEAMS_CHATS
from tests.tools.tool_world import RecordingPushTarget, ToolWorld, tool_world


async def _old_one_on_one(world: ToolWorld, person: str) -> tuple[str, str]:
    """A oneOnOne chat of the agent and ``person`` whose only message is two days old: (chat id, message id)."""
    chat = await world.admin(
        "chats",
        {
            "members": [world.agent.object_id, world.user(person).id],
            "chat_type": "oneOnOne",
            "created": "-3d",
        },
    )
    message = await world.inject(
        chat["id"], person, f"{person} here, from two days ago", created="-2d"
    )
    return chat["id"], message


async def test_create_chat_watches_the_chat_and_surfaces_its_newest_message_whatever_its_age(
    world: ToolWorld,
) -> None:
    created_id, old_message = await _old_one_on_one(world, "Grace")
    control_id, _ = await _old_one_on_one(
        world, "Alan"
    )  # watched the ordinary way, as discovery would
    await world.watched.add([control_id])

    out = await world.ok("create_chat", {"members": ["grace@contoso.onmicrosoft.com"]})
    assert (
        out["chat_id"] == created_id and out["chat_type"] == "oneOnOne"
    )  # Graph returns the existing 1:1
    assert [m["user_id"] for m in out["members"]] == [world.user("Grace").id]
    assert out["watched"] is True and created_id in out["_next_action"]
    assert created_id in (await world.backend.read_text(TEAMS_CHATS.watched_key) or "").split()

    push = RecordingPushTarget()
    world.hub.register(push)
    await world.poller.cycle()
    assert [(m.chat_id, m.message_id) for m in push.received] == [(created_id, old_message)]

    listed = await world.ok("list_watched_chats", {})
    assert {c["chat_id"] for c in listed["chats"]} == {
        world.chat(0),
        world.chat(1),
        world.chat(2),
        created_id,
        control_id,
    }
    assert listed["count"] == 5 and listed["list_readable"] is True and listed["unsaved"] == 0


async def test_a_chat_made_by_create_chat_surfaces_its_newest_message_on_another_replica(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    """The rule is shared: a second replica on the same store, which never saw the create_chat call,
    surfaces the newest message of that chat whatever its age, and nothing older."""
    async with tool_world(emu, tmp_path) as maker, tool_world(emu, tmp_path) as other:
        created_id, _ = await _old_one_on_one(maker, "Grace")
        newest = await maker.inject(created_id, "Grace", "and again, a day later", created="-1d")
        out = await maker.ok("create_chat", {"members": ["grace@contoso.onmicrosoft.com"]})
        assert out["chat_id"] == created_id
        assert (
            maker.hub.live_targets() == []
        )  # the maker holds no target: it surfaces nothing itself

        push = RecordingPushTarget()
        other.hub.register(push)
        # Learns the chat from the shared watched list, as its discovery does every interval (the
        # maker holds the discovery lease, so only the maker walks /me/chats).
        await other.watched.load()
        for _ in range(3):
            await other.poller.cycle()
        assert [(m.chat_id, m.message_id) for m in push.received] == [(created_id, newest)]


async def test_a_created_chat_the_fleet_could_not_be_told_of_still_surfaces_on_the_replica_that_made_it(
    world: ToolWorld,
) -> None:
    created_id, old_message = await _old_one_on_one(world, "Grace")
    await world.admin(
        "faults",
        {"status": 403, "method": "GET", "route_pattern": r"/chats/.*/messages$", "count": 1},
    )
    out = await world.ok("create_chat", {"members": ["grace@contoso.onmicrosoft.com"]})
    assert out["chat_id"] == created_id and out["watched"] is True
    assert (
        await world.backend.read_text(TEAMS_CHATS.cursor_key(created_id)) is None
    )  # nothing recorded for the fleet

    push = RecordingPushTarget()
    world.hub.register(push)
    await world.poller.cycle()
    assert [(m.chat_id, m.message_id) for m in push.received] == [(created_id, old_message)]


async def test_create_group_chat_with_a_topic(world: ToolWorld) -> None:
    out = await world.ok(
        "create_chat",
        {
            "members": ["grace@contoso.onmicrosoft.com", world.user("Alan").id],
            "topic": "Incident review",
        },
    )
    assert out["chat_type"] == "group" and out["topic"] == "Incident review"
    assert {m["display_name"] for m in out["members"]} == {"Grace Hopper", "Alan Turing"}
    listed = await world.ok("list_watched_chats", {})
    assert {"chat_id": out["chat_id"], "topic": "Incident review"} in listed["chats"]
    sent = await world.ok(
        "send_teams_message", {"chat_id": out["chat_id"], "text": "Kick-off"}, push=True
    )
    assert sent["chat_id"] == out["chat_id"]


async def test_create_chat_refuses_unknown_people_and_impossible_shapes(world: ToolWorld) -> None:
    assert "No user 'nobody@contoso.onmicrosoft.com'" in await world.error(
        "create_chat", {"members": ["nobody@contoso.onmicrosoft.com"]}
    )
    assert "exactly one other person" in await world.error(
        "create_chat",
        {"members": ["grace@contoso.onmicrosoft.com"], "chat_type": "oneOnOne", "topic": "x"},
    )
    assert "names only the agent user" in await world.error(
        "create_chat", {"members": [world.agent.upn]}
    )
    assert "at least 1 item" in await world.error("create_chat", {"members": []})
    assert len(world.watched.chats) == 3


async def test_sending_to_a_readable_chat_that_is_not_watched_starts_watching_it(
    world: ToolWorld,
) -> None:
    chat = await world.admin(
        "chats",
        {
            "members": [world.agent.object_id, world.user("Alan").id, world.user("Ada").id],
            "topic": "Side thread",
        },
    )
    assert chat["id"] not in world.watched
    await world.ok(
        "send_teams_message", {"chat_id": chat["id"], "text": "Joining here."}, push=True
    )
    assert chat["id"] in (await world.backend.read_text(TEAMS_CHATS.watched_key) or "").split()
    listed = await world.ok("list_watched_chats", {})
    assert {"chat_id": chat["id"], "topic": "Side thread"} in listed["chats"]
