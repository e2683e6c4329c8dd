"""edit_teams_message, delete_teams_message, list_chat_members and whoami, against the emulator over HTTP."""

from __future__ import annotations

from emulator.state import Chat, ChatMessage
from service.ledger.memory.interactions import Direction, InteractionQuery
from tests.tools.tool_world import RecordingPushTarget, ToolWorld


async def _post(world: ToolWorld, chat: str, text: str) -> str:
    out = await world.ok("send_teams_message", {"chat_id": chat, "text": text}, push=True)
    return str(out["message_id"])


def _message(world: ToolWorld, chat: str, message_id: str) -> ChatMessage:
    return next(m for m in world.emu.state.messages(chat) if m.id == message_id)


async def test_the_agent_edits_its_own_message_and_nobody_gets_it_as_new(world: ToolWorld) -> None:
    chat = world.chat(1)
    push = RecordingPushTarget()
    world.hub.register(push)
    await world.poller.cycle()  # first sight of every chat: nothing new yet
    posted = await _post(world, chat, "Deploy at 5 pm")

    out = await world.ok(
        "edit_teams_message",
        {
            "chat_id": chat,
            "message_id": posted,
            "text": "Deploy at <b>6 pm</b>",
            "content_type": "html",
        },
    )
    assert (out["state"], out["interaction_logged"]) == ("edited", True)
    edited = _message(world, chat, posted)
    assert (edited.content, edited.content_type) == ("Deploy at <b>6 pm</b>", "html")
    assert (
        edited.last_edited is not None and len(world.emu.state.messages(chat)) == 1
    )  # replaced, not re-posted
    for _ in range(3):
        await world.poller.cycle()
    assert push.received == []  # the agent's own message, edited, is nobody's to deliver
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.message_id) for r in records] == [("sent", posted), ("edited", posted)]
    trail = (await world.ok("read_interactions", {"direction": "out"}))["records"]
    # Who asked, for each action: the host and session of the call (claude-code/1.0, a push host here).
    assert [(r["action"], r["host"], r["session"], r["replica"]) for r in trail] == [
        ("sent", "claude-code/1.0", "session-1", "replica-test"),
        ("edited", "codex/1.0", "session-1", "replica-test"),
    ]


async def test_another_persons_message_is_neither_edited_nor_deleted(world: ToolWorld) -> None:
    chat = world.chat(1)
    theirs = await world.inject(chat, "Grace", "Grace's own words")
    for tool, extra in (
        ("edit_teams_message", {"text": "put words in her mouth"}),
        ("delete_teams_message", {}),
    ):
        text = await world.error(tool, {"chat_id": chat, "message_id": theirs, **extra})
        assert "was not posted by the agent" in text and "Nothing was changed" in text
    kept = _message(world, chat, theirs)
    assert (kept.content, kept.deleted, kept.last_edited) == ("Grace's own words", None, None)
    assert "is not in chat" in await world.error(
        "delete_teams_message", {"chat_id": chat, "message_id": "42"}
    )


async def test_the_agent_withdraws_its_message_once(world: ToolWorld) -> None:
    chat = world.chat(2)
    posted = await _post(world, chat, "Wrong chat, sorry")
    out = await world.ok("delete_teams_message", {"chat_id": chat, "message_id": posted})
    assert out["state"] == "deleted" and _message(world, chat, posted).deleted is not None
    again = await world.ok("delete_teams_message", {"chat_id": chat, "message_id": posted})
    assert again["state"] == "already_deleted"
    text = await world.error(
        "edit_teams_message", {"chat_id": chat, "message_id": posted, "text": "x"}
    )
    assert "was deleted and cannot be edited" in text


async def test_a_delete_whose_answer_was_lost_is_settled_by_reading_the_message_back(
    world: ToolWorld,
) -> None:
    chat = world.chat(0)
    posted = await _post(world, chat, "Withdraw me")
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": r"/softDelete$",
            "after_commit": True,
            "count": 1,
        },
    )
    out = await world.ok("delete_teams_message", {"chat_id": chat, "message_id": posted})
    assert out["state"] == "deleted" and _message(world, chat, posted).deleted is not None

    other = await _post(world, chat, "Keep me for now")
    await world.admin(
        "faults", {"status": 500, "method": "POST", "route_pattern": r"/softDelete$", "count": 1}
    )
    text = await world.error("delete_teams_message", {"chat_id": chat, "message_id": other})
    assert (
        "was not deleted" in text and "still there" in text
    )  # a 500 before the delete: read back, not done
    assert _message(world, chat, other).deleted is None


async def test_an_edit_whose_answer_was_lost_is_sent_again_and_lands_once(world: ToolWorld) -> None:
    chat = world.chat(0)
    posted = await _post(world, chat, "Version one")
    await world.admin(
        "faults",
        {
            "status": 503,
            "method": "PATCH",
            "route_pattern": r"/messages/",
            "count": 1,
            "after_commit": True,
        },
    )
    out = await world.ok(
        "edit_teams_message", {"chat_id": chat, "message_id": posted, "text": "Version two"}
    )
    assert out["state"] == "edited"
    assert [m.content for m in world.emu.state.messages(chat)] == ["Version two"]


async def test_list_chat_members_says_who_is_a_sponsor_and_who_is_the_agent(
    world: ToolWorld,
) -> None:
    out = await world.ok("list_chat_members", {"chat_id": world.chat(1)})
    rows = {r["user_id"]: r for r in out["members"]}
    ada, grace = world.user("Ada").id, world.user("Grace").id
    assert set(rows) == {world.agent.object_id, ada, grace} and out["count"] == 3
    assert rows[ada]["is_sponsor"] and not rows[grace]["is_sponsor"]
    assert rows[world.agent.object_id]["is_agent"] and not rows[ada]["is_agent"]
    assert not any(r["external"] for r in rows.values())


async def test_whoami_names_the_agent_user_its_identity_and_sponsors(world: ToolWorld) -> None:
    out = await world.ok("whoami", {})
    seed = world.seed
    assert out["agent_user_id"] == seed.agent_user.id == world.agent.object_id
    assert out["agent_identity_id"] == seed.agent_identity.id and out["auth_mode"] == "agent_user"
    assert [s["user_id"] for s in out["sponsors"]] == [world.user("Ada").id] and out[
        "sponsors_known"
    ]
    assert out["replica_id"] == "replica-test"


def _chat(world: ToolWorld, chat_id: str) -> Chat:
    chat = world.emu.state.chat(chat_id)
    assert chat is not None
    return chat


async def _group_without(world: ToolWorld, *people: str) -> str:
    chat = await world.admin(
        "chats",
        {
            "members": [world.agent.object_id, *(world.user(p).id for p in people)],
            "chat_type": "group",
            "topic": "launch",
        },
    )
    return str(chat["id"])


async def test_a_sponsors_ask_brings_a_person_into_a_chat_the_sponsor_is_in_once(
    world: ToolWorld,
) -> None:
    chat = world.chat(2)  # the agent, Ada (the sponsor) and Alan
    ask = await world.inject(chat, "Ada", "Please add Grace to this chat")
    args = {
        "chat_id": chat,
        "user": "grace@contoso.onmicrosoft.com",
        "requested_in_chat_id": chat,
        "requested_by_message_id": ask,
    }
    out = await world.ok("add_chat_member", args)
    assert (out["state"], out["user_id"], out["requested_by"]) == (
        "added",
        world.user("Grace").id,
        world.user("Ada").id,
    )
    members = {m.user_id for m in _chat(world, chat).members}
    assert world.user("Grace").id in members
    again = await world.ok("add_chat_member", args)
    assert again["state"] == "already_member"
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.chat_id) for r in records] == [("member_added", chat)]


async def test_nobody_but_a_sponsor_in_that_chat_brings_people_in(world: ToolWorld) -> None:
    chat = world.chat(2)
    grace_asks = await world.inject(
        world.chat(1), "Grace", "Add Grace's friend Alan's boss to chat 2"
    )
    text = await world.error(
        "add_chat_member",
        {
            "chat_id": chat,
            "user": world.user("Grace").id,
            "requested_in_chat_id": world.chat(1),
            "requested_by_message_id": grace_asks,
        },
    )
    assert "Only a sponsor of the agent may ask" in text
    # Ada asks, but for a chat she is not in: the agent, Grace and Alan.
    elsewhere = await _group_without(world, "Grace", "Alan")
    ada_asks = await world.inject(world.chat(0), "Ada", "Add me to the launch chat")
    text = await world.error(
        "add_chat_member",
        {
            "chat_id": elsewhere,
            "user": world.user("Ada").id,
            "requested_in_chat_id": world.chat(0),
            "requested_by_message_id": ada_asks,
        },
    )
    assert "not a member of chat" in text
    old_ask = await world.inject(chat, "Ada", "Add Grace, please", created="-2d")
    text = await world.error(
        "add_chat_member",
        {
            "chat_id": chat,
            "user": world.user("Grace").id,
            "requested_in_chat_id": chat,
            "requested_by_message_id": old_ask,
        },
    )
    assert "from the last day" in text
    assert {m.user_id for m in _chat(world, chat).members} == {
        world.agent.object_id,
        world.user("Ada").id,
        world.user("Alan").id,
    }
    assert (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records == ()


async def test_an_add_whose_answer_was_lost_is_settled_from_the_members(world: ToolWorld) -> None:
    chat = world.chat(2)
    ask = await world.inject(chat, "Ada", "Please add Grace")
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": r"/members$",
            "after_commit": True,
            "count": 1,
        },
    )
    out = await world.ok(
        "add_chat_member",
        {
            "chat_id": chat,
            "user": world.user("Grace").id,
            "requested_in_chat_id": chat,
            "requested_by_message_id": ask,
        },
    )
    assert out["state"] == "added"
    added = [m for m in _chat(world, chat).members if m.user_id == world.user("Grace").id]
    assert len(added) == 1


async def test_a_placeholder_is_posted_updated_and_becomes_the_answer_in_one_message(
    world: ToolWorld,
) -> None:
    chat = world.chat(1)
    posted = await world.ok("post_placeholder", {"chat_id": chat}, push=True)
    assert posted["state"] == "posted" and posted["post_outcome"] == "posted"
    message_id = posted["message_id"]
    assert _message(world, chat, message_id).content == "\u23f3 Working on it…"
    await world.ok(
        "update_placeholder",
        {"chat_id": chat, "message_id": message_id, "status": "Running the tests"},
    )
    assert _message(world, chat, message_id).content == "\u23f3 Running the tests"
    done = await world.ok(
        "resolve_placeholder",
        {"chat_id": chat, "message_id": message_id, "final_text": "All 40 tests pass."},
    )
    assert done["state"] == "resolved"
    assert [m.content for m in world.emu.state.messages(chat)] == ["All 40 tests pass."]

    other = (await world.ok("post_placeholder", {"chat_id": chat, "status": "Looking"}, push=True))[
        "message_id"
    ]
    gone = await world.ok("resolve_placeholder", {"chat_id": chat, "message_id": other})
    assert gone["state"] == "withdrawn" and _message(world, chat, other).deleted is not None
    theirs = await world.inject(chat, "Grace", "not a placeholder")
    text = await world.error(
        "update_placeholder", {"chat_id": chat, "message_id": theirs, "status": "x"}
    )
    assert "was not posted by the agent" in text
