"""Which team channel messages are the agent's to hear (service.workers.channel_reader.ChannelRules),
on threads as Graph's delta returns them (a root with its replies)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from service.graph.team_models import ChannelThread
from service.workers.channel_reader import ChannelRules

AGENT, ADA, GRACE = "agent-id", "ada-id", "grace-id"
CHANNEL, OTHER = "19:ops@thread.tacv2", "19:launch@thread.tacv2"
T0 = datetime(2026, 12, 6, 9, 0, tzinfo=timezone.utc)


def _message(
    id: str, sender: str, minute: int, *, mentions: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "id": id,
        "messageType": "message",
        "createdDateTime": (T0 + timedelta(minutes=minute)).isoformat(),
        "from": {"user": {"id": sender, "displayName": sender}},
        "body": {"contentType": "text", "content": "text"},
        "mentions": [
            {"id": i, "mentionText": who, "mentioned": {"user": {"id": who}}}
            for i, who in enumerate(mentions)
        ],
    }


def _thread(root: dict[str, Any], *replies: dict[str, Any]) -> ChannelThread:
    return ChannelThread.model_validate({**root, "replies": list(replies)})


def _addressed(rules: ChannelRules, thread: ChannelThread, channel: str = CHANNEL) -> set[str]:
    return {m.id for m in rules.threaded(thread, "team", channel) if m.addressed}


def test_a_mention_of_the_agent_is_addressed_and_a_mention_of_someone_else_is_not() -> None:
    rules = ChannelRules(AGENT)
    thread = _thread(
        _message("1", ADA, 0, mentions=(AGENT,)),
        _message("2", GRACE, 1, mentions=(ADA,)),
        _message("3", GRACE, 2, mentions=(AGENT,)),
    )
    assert _addressed(rules, thread) == {"1", "3"}


def test_replies_in_a_thread_the_agent_started_are_addressed() -> None:
    thread = _thread(_message("1", AGENT, 0), _message("2", ADA, 1), _message("3", GRACE, 2))
    assert _addressed(ChannelRules(AGENT), thread) == {"2", "3"}


def test_only_replies_after_the_agent_answered_are_addressed() -> None:
    thread = _thread(
        _message("1", ADA, 0),
        _message("2", GRACE, 1),  # before the agent took part: chatter
        _message("3", AGENT, 2),
        _message("4", ADA, 3),
    )
    assert _addressed(ChannelRules(AGENT), thread) == {"4"}


def test_an_operators_channel_delivers_every_message_and_only_there() -> None:
    rules = ChannelRules(AGENT, frozenset({CHANNEL}))
    thread = _thread(_message("1", ADA, 0), _message("2", GRACE, 1))
    assert _addressed(rules, thread) == {"1", "2"}
    assert _addressed(rules, thread, OTHER) == set()


def test_every_message_carries_its_thread() -> None:
    thread = ChannelThread.model_validate(
        {**_message("1", ADA, 0), "subject": "Release", "replies": [_message("2", GRACE, 1)]}
    )
    judged = ChannelRules(AGENT).threaded(thread, "team", CHANNEL)
    assert [(m.id, m.thread_id, m.thread_subject, m.reply_to_id) for m in judged] == [
        ("1", "1", "Release", None),
        ("2", "1", "Release", "1"),
    ]
