"""read_email on a mailbox shared with the agent user, on its own Sent Items, and on a mailbox it was not given."""

from __future__ import annotations

from emulator.seed import SeedUser
from tests.tools.envelope_checks import ATTACK, assert_one_envelope
from tests.tools.tool_world import ToolWorld


def _shared(world: ToolWorld, name: str) -> SeedUser:
    return next(
        u
        for u in world.seed.users
        if u.shared_mailbox and u.user_principal_name.startswith(name + "@")
    )


async def test_a_shared_mailbox_reads_like_the_inbox_enveloped_and_claims_nothing(
    world: ToolWorld,
) -> None:
    support = _shared(world, "support")
    await world.admin(
        "mail",
        {
            "to": support.user_principal_name,
            "from": "customer@example.org",
            "subject": "Order 7",
            "body": ATTACK,
            "received": "-1m",
        },
    )
    await world.admin(
        "mail",
        {"to": world.agent.upn, "from": "ada@example.com", "subject": "Mine", "received": "-1m"},
    )
    out = await world.ok("read_email", {"mailbox": support.user_principal_name})
    assert out["mailbox"] == support.user_principal_name and out["count"] == 1
    (mail,) = out["messages"]
    assert mail["sender_address"] == "customer@example.org"
    assert_one_envelope(mail["content"], "email")
    one = await world.ok("read_email", {"mailbox": support.id, "message_id": mail["message_id"]})
    assert [m["message_id"] for m in one["messages"]] == [mail["message_id"]]
    own = await world.ok("read_email", {})
    assert own["mailbox"] == "me" and [m["message_id"] for m in own["messages"]] != [
        mail["message_id"]
    ]
    assert await world.backend.list("poll_state/") == []  # a read never moves the email cursor


async def test_a_mailbox_not_shared_with_the_agent_is_refused_with_what_to_grant(
    world: ToolWorld,
) -> None:
    finance = _shared(world, "finance")
    text = await world.error("read_email", {"mailbox": finance.user_principal_name})
    assert f"may not read mailbox {finance.user_principal_name}" in text
    assert "FullAccess" in text and "Mail.Read.Shared" in text
    missing = await world.error("read_email", {"mailbox": "nobody@contoso.onmicrosoft.com"})
    assert "There is no mailbox nobody@contoso.onmicrosoft.com" in missing


async def test_sent_items_show_what_the_agent_sent(world: ToolWorld) -> None:
    sent = await world.ok(
        "send_email", {"to": ["partner@fabrikam.com"], "subject": "Hello", "text": "Hi there."}
    )
    out = await world.ok("read_email", {"folder": "sentitems"})
    assert out["folder"] == "sentitems" and out["count"] == 1
    assert "Hello" in out["messages"][0]["content"] and sent["post_outcome"] == "sent"
