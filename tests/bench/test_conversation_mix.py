"""The conversation-mix benchmark: its attribution of reads to changes, and one tiny run (one replica,
two exchanges, one reaction) through a real fleet. Counts only: no figure is asserted on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import conversation_mix
from bench.conversation_stats import (
    BEFORE_ANY_CHANGE,
    OTHER_CHATS,
    Change,
    ChangeKind,
    ChatRead,
    attribute,
    chat_reads,
    growth_to_one_replica,
)
from emulator.stats import RequestRecord

HUMANS_APP = "humans-app"


def record(
    path: str,
    at: float,
    *,
    method: str = "GET",
    app: str = "fleet-app",
    status: int = 200,
    route: str = "/v1.0/chats/{id}/messages",
) -> RequestRecord:
    return RequestRecord(method, route, path, status, app, None, at, "", 1.0, False, status == 429)


def test_only_the_fleets_gets_of_a_chats_messages_in_the_window_are_chat_reads() -> None:
    records = [
        record("/v1.0/chats/19%3Aa%40thread.v2/messages", 1.0),  # percent-encoded, as SDKs send it
        record(
            "/v1.0/chats/19:a@thread.v2/messages/newest",
            2.0,
            route="/v1.0/chats/{id}/messages/newest",
            status=429,
        ),
        record("/v1.0/chats/19:a@thread.v2/messages", 2.5, method="POST"),  # a post, not a read
        record("/v1.0/chats/19:a@thread.v2/messages", 3.0, app=HUMANS_APP),  # a person's own client
        record("/v1.0/me/chats", 3.5, route="/v1.0/me/chats"),
        record("/v1.0/chats/19:a@thread.v2/messages", 9.0),  # after the window
    ]
    reads = chat_reads(records, since=0.5, until=5.0, humans_app=HUMANS_APP)
    assert reads == [ChatRead("19:a@thread.v2", 1.0, 200), ChatRead("19:a@thread.v2", 2.0, 429)]


def test_a_read_is_put_down_to_the_latest_change_of_its_own_chat_before_it() -> None:
    changes = [
        Change(ChangeKind.PERSON, "a", "1", 1.0),
        Change(ChangeKind.PERSON, "b", "2", 1.5),
        Change(ChangeKind.AGENT, "a", "3", 4.0),
        Change(ChangeKind.REACTION, "a", "3", 7.0),
    ]
    reads = [
        ChatRead("a", 0.5, 200),  # before anything happened in a: a sweep, not the conversation
        ChatRead("a", 1.2, 200),
        ChatRead("b", 4.5, 200),  # b's person, though a's agent came since
        ChatRead("a", 4.2, 200),
        ChatRead("a", 5.0, 200),  # a's agent, twice
        ChatRead("a", 7.5, 200),  # after the reaction: counted against it
        ChatRead("z", 2.0, 200),
    ]
    assert attribute(changes, reads) == {
        "person": 2,
        "agent": 2,
        "reaction": 1,
        BEFORE_ANY_CHANGE: 1,
        OTHER_CHATS: 1,
    }


def test_each_replica_count_is_compared_with_its_own_modes_one_replica_row() -> None:
    rows = [
        {"mode": "ordered", "replicas": 6, "reads_per_change": 0.88},
        {"mode": "ordered", "replicas": 1, "reads_per_change": 0.8},
        {"mode": "notifications", "replicas": 3, "reads_per_change": 0.8},
        {"mode": "unordered", "replicas": 3, "reads_per_change": 1.0},
        {"mode": "unordered", "replicas": 1, "reads_per_change": 0},
    ]
    assert growth_to_one_replica(rows) == {
        ("ordered", 6): 1.1,
        ("ordered", 1): 1.0,
        ("notifications", 3): None,
        ("unordered", 3): None,
        ("unordered", 1): None,
    }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_tiny_conversation_counts_every_change_and_delivers_only_the_persons_messages(
    tmp_path: Path,
) -> None:
    result = conversation_mix.main(["--tiny", "--results", str(tmp_path)])
    idle, talk = result["rows"]
    assert (idle["window"], talk["window"]) == ("idle", "conversation")
    assert talk["changes"] == {
        "person": 2,
        "agent": 2,
        "reaction": 1,
    }  # a reaction to the first reply
    assert talk["changes_total"] == 5
    # Every person's message reached the host once; the agent's own replies reached nobody.
    assert talk["delivery"]["delivered"] == talk["delivery"]["posted"] == 2
    assert talk["delivery"]["duplicates"] == 0 and talk["agent_replies_pushed"] == 0
    # A delivered message was read from Graph, and every read was counted against some change.
    assert talk["reads_by_change"]["person"] >= 2
    assert sum(talk["reads_by_change"].values()) == talk["chat_reads"]
    assert talk["reads_per_change"] == round(talk["chat_reads"] / 5, 3)
    assert talk["vs_1_replica"] == 1.0  # the only step is the 1-replica one
    assert idle["seconds"] >= result["parameters"]["idle_s"] and idle["throttled_429"] == 0
    written = json.loads((tmp_path / "conversation_mix.json").read_text())
    assert written["benchmark"] == "conversation_mix" and written["rows"] == result["rows"]
    assert (tmp_path / "conversation_mix.md").read_text().startswith("## Conversation mix")
