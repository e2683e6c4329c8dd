"""Promises, the interaction log and the daily summary through their tools."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from service.ledger.memory.interactions import Channel, Direction, Interaction
from service.ledger.memory.promises import PROMISES_KEY
from tests.tools.envelope_checks import ATTACK, assert_one_envelope
from tests.tools.tool_world import ToolWorld

# 20:00 at UTC-7 on 29 November: the day 2026-11-29 ended three hours ago.
EVENING = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)


async def test_promises_are_added_listed_and_resolved(world: ToolWorld) -> None:
    chat = world.chat(0)
    added = (
        await world.ok(
            "add_promise",
            {
                "text": "Send the release notes",
                "chat_id": chat,
                "to": "Ada",
                "due": "2026-12-04T17:00:00Z",
            },
        )
    )["promise"]
    assert (
        added["status"] == "open"
        and added["chat_id"] == chat
        and added["due_at"] == "2026-12-04T17:00:00Z"
    )
    other = (await world.ok("add_promise", {"text": "Book the review"}))["promise"]

    open_now = await world.ok("list_promises", {})
    assert [p["id"] for p in open_now["promises"]] == [added["id"], other["id"]]

    done = (await world.ok("resolve_promise", {"id": added["id"], "note": "Posted in the chat"}))[
        "promise"
    ]
    assert (
        done["status"] == "resolved"
        and done["resolution"] == "Posted in the chat"
        and done["resolved_at"]
    )
    assert [p["id"] for p in (await world.ok("list_promises", {}))["promises"]] == [other["id"]]
    assert [
        p["id"] for p in (await world.ok("list_promises", {"status": "resolved"}))["promises"]
    ] == [added["id"]]
    assert (await world.ok("list_promises", {"status": "all"}))["count"] == 2
    assert "No promise with id 'nope'" in await world.error("resolve_promise", {"id": "nope"})


async def test_a_corrupt_promise_ledger_is_reported_and_never_overwritten(world: ToolWorld) -> None:
    kept = json.dumps(
        {"id": "p1", "text": "Keep me", "status": "open", "created_at": "2026-11-29T10:00:00Z"}
    )
    await world.backend.write_text(PROMISES_KEY, f"{kept}\nnot a promise\n")
    text = await world.error("add_promise", {"text": "Another"})
    assert "operator must fix or remove it" in text and "list_promises" in text
    listed = await world.ok("list_promises", {})
    assert [p["id"] for p in listed["promises"]] == ["p1"] and listed["skipped_lines"] == 1
    assert await world.backend.read_text(PROMISES_KEY) == f"{kept}\nnot a promise\n"


async def test_read_interactions_filters_and_envelopes_logged_text(world: ToolWorld) -> None:
    ada, grace = world.user("Ada").id, world.user("Grace").id
    at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    since = {
        "since": (at - timedelta(hours=1)).isoformat()
    }  # explicit: "today" may have begun a minute ago
    for n, record in enumerate(
        [
            Interaction(
                at, Direction.IN, Channel.CHAT, "delivered", world.chat(1), "m1", grace, body=ATTACK
            ),
            Interaction(
                at,
                Direction.IN,
                Channel.EMAIL,
                "delivered",
                "email",
                "e1",
                "x@example.com",
                summary="Invoice",
                body="Pay now",
            ),
            Interaction(
                at, Direction.IN, Channel.CHAT, "received", world.chat(0), "m2", ada, body="Status?"
            ),
        ]
    ):
        await world.interactions.record(replace(record, ts=at + timedelta(seconds=n)))
    await world.ok(
        "send_teams_message", {"chat_id": world.chat(0), "text": "All green."}, push=True
    )

    def ids(out: dict) -> list[str | None]:
        return [r["message_id"] for r in out["records"]]

    in_chat_0 = ids(await world.ok("read_interactions", {**since, "chat_id": world.chat(0)}))
    assert in_chat_0[0] == "m2" and len(in_chat_0) == 2
    assert ids(
        await world.ok("read_interactions", {**since, "direction": "in", "sender": grace})
    ) == ["m1"]
    assert ids(await world.ok("read_interactions", {**since, "action": "received"})) == ["m2"]
    outgoing = await world.ok("read_interactions", {**since, "direction": "out"})
    assert [(r["action"], r["chat_id"]) for r in outgoing["records"]] == [("sent", world.chat(0))]
    assert ids(await world.ok("read_interactions", {**since, "limit": 2, "direction": "in"})) == [
        "e1",
        "m2",
    ]

    everything = await world.ok("read_interactions", since)
    assert everything["count"] == 4 and everything["unreadable_days"] == []
    attack, mail = everything["records"][0], everything["records"][1]
    assert_one_envelope(attack["content"], "teams")
    assert_one_envelope(mail["content"], "email")
    assert "Invoice\n\nPay now" in mail["content"]
    bare = await world.ok("read_interactions", {**since, "include_bodies": False})
    assert {r["content"] for r in bare["records"]} == {None}


async def test_read_interactions_returns_single_host_lines_each_in_one_envelope(
    world: ToolWorld,
) -> None:
    at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    key = f"interactions/{at.date().isoformat()}.jsonl"
    for n, (channel, direction, summary) in enumerate(
        [
            ("teams_dm", "inbound", ATTACK),
            ("email", "inbound", "Invoice"),
            ("terminal", "outbound", "noted a promise"),
        ]
    ):
        # The single-host system's shape (service/ledger/memory/single_host_records.py), appended as it did.
        await world.backend.append_text(
            key,
            json.dumps(
                {
                    "id": f"sh{n}",
                    "ts": (at + timedelta(seconds=n)).isoformat(),
                    "channel": channel,
                    "direction": direction,
                    "sender": "entrabot-agent" if direction == "outbound" else "Ada",
                    "summary": summary,
                    "content_ref": f"ref{n}",
                    "metadata": {"chat_id": world.chat(0)} if channel == "teams_dm" else {},
                }
            )
            + "\n",
        )

    out = await world.ok("read_interactions", {"since": (at - timedelta(hours=1)).isoformat()})

    assert out["skipped_lines"] == 0
    assert [(r["message_id"], r["channel"], r["direction"]) for r in out["records"]] == [
        ("ref0", "chat", "in"),
        ("ref1", "email", "in"),
        ("ref2", "terminal", "out"),
    ]
    assert out["records"][0]["chat_id"] == world.chat(0)
    for record, source in zip(out["records"], ["teams", "email", "teams"]):
        assert_one_envelope(record["content"], source)


async def test_run_daily_summary_produces_the_ended_day_once(world: ToolWorld) -> None:
    world.clock.pinned = EVENING
    day = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc)
    for n in range(3):
        await world.interactions.record(
            Interaction(
                day + timedelta(hours=n),
                Direction.IN,
                Channel.CHAT,
                "delivered",
                world.chat(1),
                f"m{n}",
                world.user("Grace").id,
            )
        )
    late = Interaction(EVENING, Direction.IN, Channel.CHAT, "delivered", world.chat(1), "late")
    await world.interactions.record(late)  # the next day's: not counted

    first = await world.ok("run_daily_summary", {})
    assert first["day"] == "2026-11-29" and first["outcome"] == "produced"
    assert (
        first["window_start"] == "2026-11-29T00:00:00Z"
        and first["window_end"] == "2026-11-30T00:00:00Z"
    )
    assert first["counts"]["total"] == 3 and first["counts"]["by_action"] == {"delivered": 3}
    again = await world.ok("run_daily_summary", {"day": "2026-11-29"})
    assert again["outcome"] == "already_done" and again["counts"] == first["counts"]
    assert await world.backend.list("summaries/") == [
        "summaries/2026-11-29.html",
        "summaries/2026-11-29.json",
    ]

    refused = await world.error("run_daily_summary", {"day": "2026-11-30"})
    assert "has not ended yet" in refused
    assert len(await world.backend.list("summaries/")) == 2
