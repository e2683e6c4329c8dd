"""send_email: new mail, reply, reply-all and forward through the real registry and the emulator over HTTP,
each sent once — also when Graph takes the mail and loses its answer, refuses it with a 504, or the
connection is reset after Exchange took it (one mail in the recipients' inboxes and in Sent Items)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from emulator.seed import SeedUser
from emulator.server import RunningEmulator
from emulator.state import MailMessage
from service.delivery.mail_send import SEND_ID_HEADER
from service.delivery.xpia import DEFANGED_WORD
from service.devstack.fault_proxy import FaultProxy, ProxyFault, ProxyRule
from service.ledger.memory.interactions import Direction, InteractionQuery
from tests.tools.envelope_checks import ATTACK, assert_one_envelope
from tests.tools.tool_world import ToolWorld, tool_world

FAST_SETTLE_S = 0.05  # between looks in Sent Items: the emulator files a copy before it answers
ROUTES = {
    "new": r"/me/sendMail$",
    "reply": r"/me/messages/[^/]+/reply$",
    "forward": r"/me/messages/[^/]+/forward$",
}
OUTSIDER = "partner@fabrikam.com"


def _fast(world: ToolWorld) -> ToolWorld:
    world.deps.outbox.mail = replace(world.deps.outbox.mail, pause_s=FAST_SETTLE_S)
    return world


@pytest.fixture
async def mail_world(emu: RunningEmulator, tmp_path: Path) -> AsyncIterator[ToolWorld]:
    async with tool_world(emu, tmp_path) as built:
        yield _fast(built)


def _box(emu: RunningEmulator, user: SeedUser, folder: str = "inbox") -> list[MailMessage]:
    return emu.state.mailbox(user.id, folder)  # type: ignore[arg-type]


def _sent(world: ToolWorld) -> list[MailMessage]:
    return _box(world.emu, world.seed.agent_user, "sentitems")


def _marker(mail: MailMessage) -> str | None:
    return dict(mail.headers).get(SEND_ID_HEADER)


def _ada_writes(world: ToolWorld, subject: str, body: str = "Can we ship Friday?") -> str:
    """Ada mails the agent and Grace, copying Alan; the id of the agent's copy."""
    ada, grace, alan = world.user("Ada"), world.user("Grace"), world.user("Alan")
    world.emu.state.send_mail(
        ada.id,
        to=[world.seed.agent_user.user_principal_name, grace.user_principal_name],
        cc=[alan.user_principal_name],
        bcc=[],
        subject=subject,
        body=body,
        content_type="text",
        save_to_sent=True,
    )
    (mail,) = [m for m in _box(world.emu, world.seed.agent_user) if m.subject == subject]
    return mail.id


async def _out_records(world: ToolWorld) -> list[tuple[str, str, str | None]]:
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    return [(r.action, r.channel.value, r.message_id) for r in records]


async def test_a_new_mail_reaches_people_in_the_tenant_and_outside_once_and_is_logged(
    mail_world: ToolWorld,
) -> None:
    world = mail_world
    ada, grace = world.user("Ada"), world.user("Grace")
    out = await world.ok(
        "send_email",
        {
            "to": [ada.user_principal_name, OUTSIDER],
            "cc": [grace.user_principal_name],
            "subject": "Release notes",
            "text": "Version 2 is out.",
        },
    )
    assert out["post_outcome"] == "sent" and out["sent_item_id"] is None and out["answered"] is None
    assert out["to"] == [ada.user_principal_name, OUTSIDER] and out["subject"] == "Release notes"
    (copy,) = _sent(world)
    assert copy.subject == "Release notes" and _marker(copy) == out["send_id"]
    assert {a.address for a in copy.to} == {ada.user_principal_name, OUTSIDER}
    for person in (ada, grace):
        assert [(m.subject, _marker(m)) for m in _box(world.emu, person)] == [
            ("Release notes", out["send_id"])
        ]
    records = (await world.interactions.read(InteractionQuery(direction=Direction.OUT))).records
    assert [(r.action, r.channel.value, r.body) for r in records] == [
        ("sent", "email", "Version 2 is out.")
    ]
    assert out["send_id"] in records[0].summary and OUTSIDER in records[0].summary


async def test_a_reply_goes_to_the_sender_quotes_the_mail_and_returns_it_enveloped(
    mail_world: ToolWorld,
) -> None:
    world = mail_world
    ada = world.user("Ada")
    original = _ada_writes(world, f"Plan {ATTACK}", body=ATTACK)
    out = await world.ok(
        "send_email", {"mode": "reply", "message_id": original, "text": "Friday it is."}
    )
    assert out["to"] == [ada.user_principal_name] and out["cc"] == [] and out["subject"] is None
    answered = out["answered"]
    assert (
        answered["message_id"] == original and answered["sender_address"] == ada.user_principal_name
    )
    assert_one_envelope(answered["content"], "email")
    assert DEFANGED_WORD in answered["content"] and "Friday it is." not in answered["content"]
    (reply,) = [m for m in _box(world.emu, ada) if m.subject.startswith("RE: ")]
    assert _marker(reply) == out["send_id"] and reply.body.index(
        "Friday it is."
    ) < reply.body.index("Thanks!")
    assert [m.subject for m in _box(world.emu, world.user("Grace"))] == [
        f"Plan {ATTACK}"
    ]  # only the original
    assert await _out_records(world) == [("replied", "email", None)]


async def test_reply_all_answers_everyone_on_the_mail_but_the_agent(mail_world: ToolWorld) -> None:
    world = mail_world
    ada, grace, alan = world.user("Ada"), world.user("Grace"), world.user("Alan")
    original = _ada_writes(world, "Release plan")
    out = await world.ok(
        "send_email", {"mode": "reply_all", "message_id": original, "text": "Agreed."}
    )
    assert out["to"] == [ada.user_principal_name, grace.user_principal_name]
    assert out["cc"] == [alan.user_principal_name]
    for person in (ada, grace, alan):
        assert [m.subject for m in _box(world.emu, person)].count("RE: Release plan") == 1, (
            person.display_name
        )
    assert [m.subject for m in _sent(world)] == ["RE: Release plan"]


async def test_a_forward_goes_outside_the_tenant_with_the_mail_quoted(
    mail_world: ToolWorld,
) -> None:
    world = mail_world
    original = _ada_writes(world, "Invoice 77", body="Amount due: 1,200 EUR")
    out = await world.ok(
        "send_email",
        {"mode": "forward", "message_id": original, "to": [OUTSIDER], "text": "For your records."},
    )
    (copy,) = _sent(world)
    assert copy.subject == "FW: Invoice 77" and [a.address for a in copy.to] == [OUTSIDER]
    assert "For your records." in copy.body and "Amount due: 1,200 EUR" in copy.body
    assert _marker(copy) == out["send_id"] and out["answered"]["message_id"] == original
    assert await _out_records(world) == [("forwarded", "email", None)]


def _request(world: ToolWorld, mode: str, text: str) -> dict[str, Any]:
    if mode == "new":
        return {
            "to": [world.user("Ada").user_principal_name],
            "subject": f"About {text}",
            "text": text,
        }
    original = _ada_writes(world, f"Thread {text}")
    if mode == "reply":
        return {"mode": "reply", "message_id": original, "text": text}
    return {
        "mode": "forward",
        "message_id": original,
        "to": [world.user("Ada").user_principal_name],
        "text": text,
    }


def _ours(world: ToolWorld, send_id: str) -> tuple[int, int]:
    """(copies in Sent Items, copies in Ada's inbox) carrying this send id."""
    return (
        sum(_marker(m) == send_id for m in _sent(world)),
        sum(_marker(m) == send_id for m in _box(world.emu, world.user("Ada"))),
    )


@pytest.mark.parametrize("mode", ["new", "reply", "forward"])
async def test_a_send_graph_took_but_whose_answer_was_lost_is_found_in_sent_items_and_not_repeated(
    mail_world: ToolWorld, mode: str
) -> None:
    world = mail_world
    args = _request(world, mode, "lost answer")
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": ROUTES[mode],
            "after_commit": True,
            "count": 1,
        },
    )
    out = await world.ok("send_email", args)
    assert out["post_outcome"] == "found_after_lost_answer"
    assert _ours(world, out["send_id"]) == (1, 1) and len(_sent(world)) == 1
    assert out["sent_item_id"] == _sent(world)[0].id


@pytest.mark.parametrize("mode", ["new", "reply", "forward"])
async def test_a_send_refused_with_a_504_is_checked_in_sent_items_then_sent_once(
    mail_world: ToolWorld, mode: str
) -> None:
    world = mail_world
    args = _request(world, mode, "gateway timeout")
    await world.admin(
        "faults", {"status": 504, "method": "POST", "route_pattern": ROUTES[mode], "count": 1}
    )
    out = await world.ok("send_email", args)
    assert out["post_outcome"] == "sent_after_check"
    assert _ours(world, out["send_id"]) == (1, 1) and len(_sent(world)) == 1


@pytest.mark.parametrize("mode", ["new", "reply", "forward"])
async def test_a_send_whose_connection_was_reset_after_exchange_took_it_is_sent_once(
    emu: RunningEmulator, tmp_path: Path, mode: str
) -> None:
    with FaultProxy(emu.base_url) as proxy:
        proxy.add(
            ProxyRule(
                ProxyFault.COMMIT_THEN_DROP, methods=frozenset({"POST"}), path=ROUTES[mode], times=1
            )
        )
        async with tool_world(emu, tmp_path, graph_url=f"{proxy.base_url}/v1.0") as built:
            world = _fast(built)
            out = await world.ok("send_email", _request(world, mode, "connection reset"))
            assert proxy.stats().commit_then_drop == 1
            assert out["post_outcome"] == "found_after_lost_answer"
            assert _ours(world, out["send_id"]) == (1, 1) and len(_sent(world)) == 1


async def test_a_send_sent_items_cannot_settle_says_it_may_have_been_sent(
    mail_world: ToolWorld,
) -> None:
    world = mail_world
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": ROUTES["new"],
            "after_commit": True,
            "count": 1,
        },
    )
    await world.admin(
        "faults", {"status": 403, "method": "GET", "route_pattern": r"/mailFolders/sentitems/"}
    )
    text = await world.error(
        "send_email", {"to": [OUTSIDER], "subject": "Pay", "text": "Pay the invoice."}
    )
    assert "MAY have been sent" in text and "Do not resend blindly" in text
    assert len(_sent(world)) == 1  # it was, once
    assert await _out_records(world) == [("send_unconfirmed", "email", None)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"to": [OUTSIDER], "text": "x"}, "needs a subject"),
        ({"subject": "s", "text": "x"}, "at least one address in `to`"),
        ({"to": ["not an address"], "subject": "s", "text": "x"}, "is not one mail address"),
        ({"mode": "reply", "text": "x"}, "needs the message_id"),
        ({"mode": "reply", "message_id": "AAMk1", "to": [OUTSIDER], "text": "x"}, "forward it"),
        (
            {"mode": "reply_all", "message_id": "AAMk1", "subject": "Re", "text": "x"},
            "takes no subject",
        ),
        (
            {"mode": "forward", "message_id": "AAMk1", "text": "x"},
            "a forward needs at least one address",
        ),
        ({"to": [OUTSIDER], "subject": "s", "text": "   "}, "text is blank"),
    ],
)
async def test_a_send_that_does_not_fit_its_mode_is_refused_before_graph(
    mail_world: ToolWorld, args: dict[str, Any], says: str
) -> None:
    assert says in await mail_world.error("send_email", args)
    assert _sent(mail_world) == [] and await _out_records(mail_world) == []


async def test_answering_a_mail_not_in_the_agents_mailbox_sends_nothing(
    mail_world: ToolWorld,
) -> None:
    text = await mail_world.error(
        "send_email", {"mode": "reply", "message_id": "AAMkNoSuchMail", "text": "Hi"}
    )
    assert (
        "No mail with that message_id in the agent's own mailbox" in text
        and "Nothing was sent" in text
    )
    assert _sent(mail_world) == []
