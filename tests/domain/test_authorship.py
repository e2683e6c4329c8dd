"""Who wrote a chat message: one test per rule of service.graph.authorship, in both auth modes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from service.domain.agent import AgentUser
from service.graph.authorship import (
    SEND_CLOCK_SKEW,
    Author,
    SentView,
    author_of,
    people_messages,
    posted_as_agent_identity,
)
from service.graph.models import ChatMessage

PERSON = (
    "aaaaaaaa-0000-0000-0000-00000000000a"  # the signed-in person (delegated) or the agent user
)
OTHER = "bbbbbbbb-0000-0000-0000-00000000000b"
AT = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DELEGATED = AgentUser(PERSON, "ada@contoso.example", "Ada", posts_as_person=True)
AGENT_USER = AgentUser(PERSON, "entrabot@contoso.example", "Entrabot")


def message(
    mid: str,
    sender: str | None = PERSON,
    text: str = "hello",
    *,
    created: datetime = AT,
    content_type: str = "text",
    kind: str = "message",
) -> ChatMessage:
    return ChatMessage.model_validate(
        {
            "id": mid,
            "messageType": kind,
            "createdDateTime": created.isoformat(),
            "from": {"user": {"id": sender, "displayName": "Ada"}} if sender else None,
            "body": {"contentType": content_type, "content": text},
        }
    )


def test_agent_user_mode_knows_the_agent_by_its_identity() -> None:
    assert author_of(message("1"), AGENT_USER, SentView()) is Author.AGENT
    assert author_of(message("2", OTHER), AGENT_USER, SentView()) is Author.PERSON


def test_agent_user_mode_takes_a_prefixed_message_of_a_person_for_theirs() -> None:
    assert author_of(message("1", OTHER, "[EntraBot] hi"), AGENT_USER, SentView()) is Author.PERSON


def test_delegated_mode_takes_the_persons_own_message_for_theirs() -> None:
    assert author_of(message("1"), DELEGATED, SentView()) is Author.PERSON


def test_delegated_mode_takes_a_recorded_id_for_the_agents() -> None:
    assert author_of(message("1"), DELEGATED, SentView(frozenset({"1"}))) is Author.AGENT


def test_another_persons_message_is_theirs_even_while_a_send_is_in_flight() -> None:
    sent = SentView(in_flight_since=(AT - timedelta(seconds=5),))
    assert author_of(message("1", OTHER, "[EntraBot] copied"), DELEGATED, sent) is Author.PERSON


def test_the_persons_message_after_a_send_began_waits_for_the_send() -> None:
    sent = SentView(in_flight_since=(AT - timedelta(seconds=2),))
    assert author_of(message("1"), DELEGATED, sent) is Author.UNDECIDED


def test_a_send_begun_on_a_clock_slightly_ahead_still_holds_the_message() -> None:
    sent = SentView(in_flight_since=(AT + SEND_CLOCK_SKEW,))
    assert author_of(message("1"), DELEGATED, sent) is Author.UNDECIDED
    later = SentView(in_flight_since=(AT + SEND_CLOCK_SKEW + timedelta(seconds=1),))
    assert author_of(message("1"), DELEGATED, later) is Author.PERSON


def test_an_unreadable_record_places_none_of_the_persons_messages() -> None:
    assert author_of(message("1"), DELEGATED, SentView.unreadable()) is Author.UNDECIDED
    assert author_of(message("2", OTHER), DELEGATED, SentView.unreadable()) is Author.PERSON


@pytest.mark.parametrize(
    "text, content_type",
    [
        ("[EntraBot] done", "text"),
        ("  [EntraBot] done", "text"),
        ("<p>[EntraBot] <b>done</b></p>", "html"),
    ],
)
def test_an_unrecorded_prefixed_message_of_the_person_is_the_agents(
    text: str, content_type: str
) -> None:
    assert (
        author_of(message("1", text=text, content_type=content_type), DELEGATED, SentView())
        is Author.AGENT
    )


def test_the_prefix_in_the_middle_of_a_message_decides_nothing() -> None:
    assert (
        author_of(message("1", text="see the [EntraBot] note"), DELEGATED, SentView())
        is Author.PERSON
    )


def test_system_messages_are_nobodys() -> None:
    assert (
        author_of(message("1", None, kind="systemEventMessage"), DELEGATED, SentView())
        is Author.SYSTEM
    )


def test_only_the_persons_messages_need_the_record_and_only_in_delegated_mode() -> None:
    messages = [message("1"), message("2", OTHER), message("3", None, kind="systemEventMessage")]
    assert posted_as_agent_identity(messages, DELEGATED) == ["1"]
    assert posted_as_agent_identity(messages, AGENT_USER) == []


def test_people_messages_keeps_the_people_and_says_when_one_is_undecided() -> None:
    messages = [message("1", OTHER), message("2"), message("3", text="[EntraBot] mine")]
    decided = people_messages(messages, DELEGATED, SentView())
    assert [m.id for m in decided.people] == ["1", "2"] and not decided.undecided
    held = people_messages(messages, DELEGATED, SentView(in_flight_since=(AT,)))
    assert [m.id for m in held.people] == ["1"] and held.undecided
