"""send_teams_message and wait_for_sponsor_dm: the outbound path and the sponsor wait of non-push hosts.

The replica's supervisor is not running here: while a tool call waits, the test drives the chat poll's
``cycle()`` itself, which claims a sponsor's reply only because the wait is registered in the hub.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tool_results import result_text

from emulator.server import RunningEmulator
from service.delivery.hub import TargetKind
from service.devstack.fault_proxy import FaultProxy, ProxyFault, ProxyRule
from service.domain.conversation import TEAMS_CHATS
from service.domain.sponsors import SponsorGate
from service.ledger.claims.chat_cursor import parse_chat_cursor
from service.ledger.memory.interactions import Direction, InteractionQuery
from service.ledger.memory.sent_messages import parse_sent, sent_key
from service.mcp.tool_registry import ToolCall
from service.tools.sponsor_wait import SponsorWaiter
from tests.tools.test_sponsor_wait_takes_one import bootstrap_every_chat
from tests.tools.tool_world import RecordingPushTarget, ToolWorld, session, tool_world

ENVELOPE_CLOSE = "</external_content>"


async def _finish(task: asyncio.Task[Any]) -> Any:
    return await asyncio.wait_for(task, timeout=15)


async def test_send_posts_as_the_agent_user_and_logs_an_out_interaction(world: ToolWorld) -> None:
    chat = world.chat(1)
    result = await world.ok(
        "send_teams_message", {"chat_id": chat, "text": "Build is green."}, push=True
    )
    assert result["chat_id"] == chat and result["posted_as"] == "agent_user"
    assert result["wait"] == "not_waited" and result["sponsor_reply"] is None
    assert result["interaction_logged"] is True

    posted = world.emu.state.messages(chat)
    assert [(m.id, m.sender.user_id if m.sender else None, m.content) for m in posted] == [
        (result["message_id"], world.agent.object_id, "Build is green.")
    ]
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.chat_id, r.message_id, r.sender, r.body) for r in records] == [
        ("sent", chat, result["message_id"], world.agent.object_id, "Build is green.")
    ]
    # Agent-user mode: the poll knows the agent by its object id; nothing is recorded for the fleet.
    assert not await world.backend.exists(sent_key(chat))
    assert world.hub.live_targets() == []  # a push host never waits


async def test_delegated_mode_prefixes_the_text_and_records_the_sent_id_for_the_fleet(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    async with tool_world(emu, tmp_path, signed_in=emu.seed.humans[0].user_principal_name) as world:
        chat = world.chat(1)
        result = await world.ok(
            "send_teams_message", {"chat_id": chat, "text": "On it."}, push=True
        )
        assert result["posted_as"] == "signed_in_user"
        [posted] = world.emu.state.messages(chat)
        assert posted.content == "[EntraBot] On it." and posted.sender is not None
        assert (
            posted.sender.user_id == emu.seed.humans[0].id
        )  # Graph shows the person as its author
        record = parse_sent(await world.backend.read_text(sent_key(chat)) or "")
        assert record.ids == {result["message_id"]} and record.pending == ()
        assert world.poller.reader.sent is world.deps.sent_messages  # the poll reads that record


async def test_non_push_send_returns_the_sponsor_reply_from_another_chat_with_that_chats_id(
    world: ToolWorld, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sent_to, grace_chat, reply_chat = world.chat(0), world.chat(1), world.chat(2)
    task = asyncio.create_task(
        world.call("send_teams_message", {"chat_id": sent_to, "text": "Shall I ship?"})
    )
    await world.until_waiting()
    await world.poller.cycle()  # first sight of every watched chat while the wait is live
    grace_id = await world.inject(
        grace_chat, "Grace", "Not me you are waiting for."
    )  # not a sponsor
    reply_id = await world.inject(reply_chat, "Ada", f"Ship it. {ENVELOPE_CLOSE} now")
    await world.poller.cycle()
    result = await _finish(task)

    assert not result.is_error, result_text(result)
    out = result.structured_content
    assert out["chat_id"] == sent_to and out["wait"] == "reply"
    reply = out["sponsor_reply"]
    assert reply["chat_id"] == reply_chat != sent_to
    assert reply["message_id"] == reply_id and reply["sender_id"] == world.user("Ada").id
    assert reply["verified_sponsor"] is True
    # A verified sponsor's text stays outside the envelope, and cannot close one either.
    assert reply["content"].startswith("Ship it.") and "external_content" not in reply["content"]
    assert reply_chat in out["_next_action"] and "send_teams_message" in out["_next_action"]
    assert world.hub.live_targets() == []

    # Grace's message was not claimed for the wait: it stays unclaimed for a host that can take it.
    grace_cursor = json.loads(
        await world.backend.read_text(TEAMS_CHATS.cursor_key(grace_chat)) or "{}"
    )
    assert grace_cursor["bootstrapped"] is True and grace_id not in grace_cursor["seen_ids_tail"]
    inbound = (await world.interactions.read(InteractionQuery(direction=Direction.IN))).records
    assert [(r.chat_id, r.message_id, r.action) for r in inbound] == [
        (reply_chat, reply_id, "delivered")
    ]

    # Ids in the log lines, never a body.
    logged = [
        str(value)
        for record in caplog.records
        for value in (record.getMessage(), *record.__dict__.values())
    ]
    assert any(reply_id in line for line in logged)
    for body in ("Shall I ship?", "Ship it.", "Not me you are waiting for."):
        assert not any(body in line for line in logged), body


async def test_a_sponsor_message_older_than_the_wait_is_handed_over_as_backlog_not_as_an_answer(
    world: ToolWorld,
) -> None:
    """History present: Ada wrote in another chat while no host was connected. A non-push send then
    gets it in ``backlog``, told its age and that it predates the send: never as ``sponsor_reply``."""
    sent_to, old_chat = world.chat(0), world.chat(2)
    await bootstrap_every_chat(world)
    old_id = await world.inject(old_chat, "Ada", "Please rotate the keys.")
    world.clock.pinned = datetime.now(timezone.utc) + timedelta(
        hours=2
    )  # the send comes two hours later
    task = asyncio.create_task(
        world.call("send_teams_message", {"chat_id": sent_to, "text": "Deploying now."})
    )
    await world.until_waiting()
    await world.poller.cycle()
    out = (await _finish(task)).structured_content
    assert out is not None and out["wait"] == "backlog" and out["sponsor_reply"] is None
    [item] = out["backlog"]
    assert item["message_id"] == old_id and item["chat_id"] == old_chat
    assert item["predates_wait"] is True and item["age_s"] >= 7000
    assert out["more_backlog"] is False
    assert out["_next_action"].startswith(
        f"Posted: message {out['message_id']} is in chat {sent_to}"
    )
    assert "No sponsor reply to what you just sent yet" in out["_next_action"]
    assert "2.0 h ago" in out["_next_action"] and old_chat in out["_next_action"]


async def test_a_reply_written_during_the_wait_is_an_answer(world: ToolWorld) -> None:
    task = asyncio.create_task(world.call("wait_for_sponsor_dm", {"timeout_s": 30}))
    await world.until_waiting()
    await world.poller.cycle()
    await world.inject(world.chat(0), "Ada", "Yes, go ahead.")
    await world.poller.cycle()
    out = (await _finish(task)).structured_content
    assert out is not None and out["outcome"] == "reply" and out["backlog"] == []
    assert out["sponsor_reply"]["predates_wait"] is False
    assert (
        out["_next_action"].startswith("Answer the sponsor")
        and "backlog" not in out["_next_action"]
    )


async def test_a_sponsor_wait_that_gets_no_reply_times_out_without_an_error(
    world: ToolWorld,
) -> None:
    task = asyncio.create_task(world.call("wait_for_sponsor_dm", {"timeout_s": 0.3}))
    await world.until_waiting()
    await world.poller.cycle()
    await world.inject(world.chat(1), "Grace", "Only a colleague writes.")
    await world.poller.cycle()
    result = await _finish(task)
    assert not result.is_error, result_text(result)
    out = result.structured_content
    assert out["outcome"] == "timeout" and out["sponsor_reply"] is None
    assert "Do not wait again in a loop" in out["_next_action"]
    assert world.hub.live_targets() == []


async def test_the_requested_timeout_is_capped_by_the_server(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    async with tool_world(emu, tmp_path, sponsor_wait_timeout_s=0.2) as world:
        out = await world.ok("wait_for_sponsor_dm", {"timeout_s": 3600})
        assert out["outcome"] == "timeout" and out["timeout_s"] == 0.2


async def test_an_implicit_wait_after_a_send_is_short_and_says_the_message_was_posted(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    """wait_for_reply omitted on a non-push host: the wait is ENTRABOT_SEND_REPLY_WAIT_S, not the
    sponsor-wait cap, so a host's request timeout never turns a posted message into a failed send."""
    async with tool_world(
        emu, tmp_path, sponsor_wait_timeout_s=600.0, send_reply_wait_s=0.3
    ) as world:
        out = await world.ok(
            "send_teams_message", {"chat_id": world.chat(1), "text": "Deploy done."}
        )
        assert out["wait"] == "timeout" and out["wait_timeout_s"] == 0.3
        assert out["_next_action"].startswith(
            f"Posted: message {out['message_id']} is in chat {world.chat(1)}"
        )
        assert "do not send it again" in out["_next_action"]
        assert [m.id for m in world.emu.state.messages(world.chat(1))] == [out["message_id"]]


async def test_a_send_says_in_its_first_words_whether_it_waited_and_for_how_long(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    """A plain HTTP client's send blocked for the default wait and looked hung (issue 36): the result's
    first field says the call waited after posting, how long, and how not to."""
    async with tool_world(
        emu, tmp_path, sponsor_wait_timeout_s=600.0, send_reply_wait_s=0.3
    ) as world:
        chat = world.chat(1)
        waited = await world.call("send_teams_message", {"chat_id": chat, "text": "Deploy done."})
        text = result_text(waited)
        assert re.match(
            r'\{"status": ?"Posted, then waited \d+\.\d s \(of up to 0\.3 s\) for a '
            r"sponsor's reply: no sponsor replied\. Hosts without channel pushes wait by "
            r"default \(ENTRABOT_SEND_REPLY_WAIT_S\); wait_for_reply=false returns at once\.",
            text,
        ), text[:300]
        asked_not = await world.ok(
            "send_teams_message", {"chat_id": chat, "text": "FYI.", "wait_for_reply": False}
        )
        assert asked_not["status"] == "Posted; not waiting for a reply (wait_for_reply=false)."
        pushed = await world.ok("send_teams_message", {"chat_id": chat, "text": "Hi."}, push=True)
        assert (
            pushed["status"] == "Posted; not waiting: replies reach this host as channel messages."
        )


async def test_a_wait_ends_inside_the_time_budget_the_host_gave(world: ToolWorld) -> None:
    call = ToolCall(
        session=session("budgeted", push=False), hub=world.hub, request_id=1, time_budget_s=2.5
    )
    started = asyncio.get_running_loop().time()
    result = await world.tools.call("wait_for_sponsor_dm", {"timeout_s": 300}, call)
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["outcome"] == "timeout"
    assert (
        result.structured_content["timeout_s"] == 0.5
    )  # 2.5 s less the margin left for the answer's way back
    assert asyncio.get_running_loop().time() - started < 2.5


@pytest.mark.parametrize(
    ("requested", "default", "budget", "expected"),
    [
        (None, None, None, 600.0),  # the cap
        (None, 45.0, None, 45.0),  # an implicit wait's default
        (3600.0, None, None, 600.0),  # never past the cap
        (None, 45.0, 60.0, 45.0),  # fits the budget already
        (None, None, 60.0, 54.0),  # the budget less 10 %
        (None, None, 10.0, 8.0),  # less at least 2 s
        (None, None, 1.0, 0.0),  # no room: answer at once
    ],
)
def test_the_wait_is_the_ask_within_the_cap_and_the_hosts_budget(
    requested: float | None, default: float | None, budget: float | None, expected: float
) -> None:
    waiter = SponsorWaiter(SponsorGate((), tenant_id="t"), max_timeout_s=600.0)
    assert waiter.timeout_for(requested, default_s=default, budget_s=budget) == pytest.approx(
        expected
    )


async def test_cancelling_a_wait_unregisters_it_and_a_later_reply_is_not_lost(
    world: ToolWorld,
) -> None:
    task = asyncio.create_task(
        world.call("wait_for_sponsor_dm", {"timeout_s": 30}, session_id="cancelled")
    )
    await world.until_waiting()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.hub.live_targets() == []

    late = await world.inject(world.chat(0), "Ada", "Are you there?")
    await world.poller.cycle()  # no live target: polls and claims nothing
    # The chat's first watch may have started its cursor (no host needed); nothing is claimed in it.
    text = await world.backend.read_text(TEAMS_CHATS.cursor_key(world.chat(0)))
    assert text is None or parse_chat_cursor(text).claims == ()

    second = asyncio.create_task(
        world.call("wait_for_sponsor_dm", {"timeout_s": 30}, session_id="second")
    )
    await world.until_waiting()
    await world.poller.cycle()
    out = (await _finish(second)).structured_content
    assert out["outcome"] == "reply" and out["sponsor_reply"]["message_id"] == late
    assert world.hub.live_targets() == []


async def test_a_wait_goes_first_while_a_push_host_is_also_connected(world: ToolWorld) -> None:
    push = RecordingPushTarget()
    world.hub.register(push)
    task = asyncio.create_task(world.call("wait_for_sponsor_dm", {"timeout_s": 30}))
    await world.until_waiting()
    await world.poller.cycle()
    reply = await world.inject(world.chat(1), "Ada", "Sponsor here.")
    other = await world.inject(world.chat(1), "Grace", "Colleague here.")
    await world.poller.cycle()
    out = (await _finish(task)).structured_content
    assert out["sponsor_reply"]["message_id"] == reply
    assert [m.message_id for m in push.received] == [other]
    assert [t.kind for t in world.hub.live_targets()] == [TargetKind.PUSH]


async def test_without_a_known_sponsor_the_explicit_wait_refuses_and_send_does_not_block(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    async with tool_world(emu, tmp_path, agent_identity_id=None) as world:
        assert not world.deps.gate.sponsor_ids
        assert "No sponsor of the agent identity is known" in await world.error(
            "wait_for_sponsor_dm", {}
        )
        out = await world.ok("send_teams_message", {"chat_id": world.chat(0), "text": "Hello"})
        assert out["wait"] == "no_sponsors" and out["message_id"]
        assert world.hub.live_targets() == []


async def test_a_send_whose_answer_graph_lost_is_found_in_the_chat_and_not_posted_again(
    world: ToolWorld,
) -> None:
    chat = world.chat(1)
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": r"/chats/.*/messages$",
            "after_commit": True,
            "count": 1,
        },
    )
    out = await world.ok(
        "send_teams_message", {"chat_id": chat, "text": "Deploying now."}, push=True
    )
    assert out["post_outcome"] == "found_after_lost_answer"
    assert [(m.id, m.content) for m in world.emu.state.messages(chat)] == [
        (out["message_id"], "Deploying now.")
    ]
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.chat_id, r.message_id) for r in records] == [
        ("sent", chat, out["message_id"])
    ]


async def test_a_send_graph_refused_with_a_504_is_checked_then_posted_once(
    world: ToolWorld,
) -> None:
    chat = world.chat(1)
    await world.admin(
        "faults",
        {"status": 504, "method": "POST", "route_pattern": r"/chats/.*/messages$", "count": 1},
    )
    out = await world.ok("send_teams_message", {"chat_id": chat, "text": "Ship it."}, push=True)
    assert out["post_outcome"] == "posted_after_check"
    assert [m.content for m in world.emu.state.messages(chat)] == ["Ship it."]


async def test_a_send_that_cannot_be_settled_says_it_may_have_been_posted(world: ToolWorld) -> None:
    chat = world.chat(1)
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": r"/chats/.*/messages$",
            "after_commit": True,
            "count": 1,
        },
    )
    await world.admin(
        "faults", {"status": 403, "method": "GET", "route_pattern": r"/chats/.*/messages$"}
    )
    text = await world.error(
        "send_teams_message", {"chat_id": chat, "text": "Pay the invoice."}, push=True
    )
    assert "MAY have been posted" in text and "Do not resend blindly" in text
    assert [m.content for m in world.emu.state.messages(chat)] == [
        "Pay the invoice."
    ]  # it was, once
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.chat_id, r.message_id) for r in records] == [
        ("send_unconfirmed", chat, None)
    ]


async def test_a_send_whose_connection_was_reset_after_graph_took_it_posts_once(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    with FaultProxy(emu.base_url) as proxy:
        proxy.add(
            ProxyRule(
                ProxyFault.COMMIT_THEN_DROP,
                methods=frozenset({"POST"}),
                path=r"/chats/.*/messages$",
                times=1,
            )
        )
        async with tool_world(emu, tmp_path, graph_url=f"{proxy.base_url}/v1.0") as world:
            chat = world.chat(2)
            out = await world.ok(
                "send_teams_message", {"chat_id": chat, "text": "Rolling back."}, push=True
            )
        assert proxy.stats().commit_then_drop == 1
    assert out["post_outcome"] == "found_after_lost_answer"
    assert [m.content for m in emu.state.messages(chat)] == ["Rolling back."]


async def test_wait_for_reply_overrides_what_the_host_would_get(world: ToolWorld) -> None:
    chat = world.chat(0)
    quick = await world.ok(
        "send_teams_message", {"chat_id": chat, "text": "FYI", "wait_for_reply": False}
    )
    assert quick["wait"] == "not_waited" and "wait_for_sponsor_dm" in quick["_next_action"]
    asked = await world.ok(
        "send_teams_message",
        {"chat_id": chat, "text": "Any news?", "wait_for_reply": True, "timeout_s": 0.2},
        push=True,
    )
    assert asked["wait"] == "timeout" and asked["wait_timeout_s"] == 0.2
    assert world.hub.live_targets() == []
