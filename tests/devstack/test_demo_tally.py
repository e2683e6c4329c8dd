"""The demo's closing account: pushes that differ from what it sent are explained, never hidden."""

from __future__ import annotations

import io

from service.devstack.channel_host import ReceivedPush
from service.devstack.demo import DemoPrinter
from service.devstack.demo_tally import MAIL, DemoTally

SEEDED_CHAT = "19:b55e0c2203f817e4b2d7@thread.v2"


def push(
    message_id: str,
    chat_id: str = "19:a1d4c0de-0000-4a1a@unq.gbl.spaces",
    user: str = "Ada Lovelace",
) -> ReceivedPush:
    return ReceivedPush(
        "host-a", "http://127.0.0.1:1/mcp", chat_id, message_id, user, "", "text", 0.0
    )


def tally_of(sent_chat: list[str], sent_mails: int, pushes: list[ReceivedPush]) -> DemoTally:
    tally = DemoTally()
    for message_id in sent_chat:
        tally.sent_chat(message_id)
    for _ in range(sent_mails):
        tally.sent_mail()
    for p in pushes:
        tally.pushed(p, "replica-1")
    return tally


def test_a_seeded_message_surfaced_on_first_sight_is_named_as_the_extra_push() -> None:
    # The run the issue describes: 27 chat messages and 3 mails sent, 31 pushes, none twice.
    sent = [str(n) for n in range(27)]
    pushes = [push(n) for n in sent] + [push(f"m{n}", MAIL) for n in range(3)]
    pushes.append(push("seeded", SEEDED_CHAT))
    tally = tally_of(sent, 3, pushes)
    lines = tally.summary()
    assert (
        lines[0]
        == "Sent 27 chat messages and 3 mails; delivered 31 pushes (31 distinct, 0 duplicated):"
    )
    assert lines[1] == "  30 of the 30 sent"
    assert lines[2].startswith(
        "  1 from the seeded history: on first sight a chat surfaces its newest message"
    )
    assert SEEDED_CHAT[:18] in lines[3]
    assert tally.settled


def test_messages_sent_just_before_the_stop_are_counted_as_not_yet_polled() -> None:
    tally = tally_of(["1", "2", "3"], 2, [push("1"), push("m1", MAIL)])
    assert not tally.settled
    assert (
        tally.summary()[-1]
        == "  3 sent but not polled before the stop (2 chat, 1 mail); they stay in Graph"
    )


def test_a_message_pushed_twice_is_reported_as_a_duplicate() -> None:
    tally = DemoTally()
    tally.sent_chat("1")
    assert tally.pushed(push("1"), "replica-1") is False
    assert tally.pushed(push("1"), "replica-2") is True
    assert tally.summary()[0].endswith("delivered 2 pushes (1 distinct, 1 duplicated):")
    assert tally.by_replica == {"replica-1": 1, "replica-2": 1}


def test_the_fleets_acknowledged_count_is_stated_beside_the_distinct_pushes() -> None:
    tally = tally_of(["1", "2", "3"], 0, [push("1"), push("2"), push("3")])
    assert not any("acknowledged" in line for line in tally.summary())  # not read: not claimed
    tally.acknowledged = 2
    assert tally.summary()[2] == (
        "  2 of the 3 distinct acknowledged by their host: the fleet counts a push "
        "delivered only then, and pushes it again until it is"
    )


def test_two_people_sending_the_same_text_print_as_two_messages_by_their_ids() -> None:
    out = io.StringIO()
    printer = DemoPrinter({"http://127.0.0.1:1/mcp": "replica-1"}, DemoTally(), out)
    printer(push("1764791702123", user="Ada Lovelace"))
    printer(push("1764791702999", user="Grace Hopper"))
    printer(push("AAMkAGI2TG93AAA=AAMkAGI2TG93ZZ1=", MAIL, user="Ada Lovelace"))
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[3] for line in lines] == [
        "msg …91702123",
        "msg …91702999",
        "msg …TG93ZZ1=",
    ]
    assert "DUPLICATE" not in out.getvalue()
    printer(push("1764791702999", user="Grace Hopper"))  # the same message again: a real duplicate
    assert out.getvalue().splitlines()[-1].endswith("DUPLICATE!")


def test_a_seeded_message_names_its_id_in_the_closing_account() -> None:
    tally = tally_of([], 0, [push("1764791702123", SEEDED_CHAT)])
    assert tally.summary()[-1] == f"    chat {SEEDED_CHAT[:18]}…  msg …91702123  Ada Lovelace"
