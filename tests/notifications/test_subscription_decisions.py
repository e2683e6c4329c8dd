"""The subscription manager's rules, as pure decisions: what to create, renew, recreate or
reauthorize given the record, the lifecycle events and the time; and the record's round trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.domain.source import Source
from service.ledger.records.reads import CorruptValueError
from service.notifications.lifecycle_log import (
    LifecycleEvent,
    parse_event_line,
    read_events,
    record_event,
    render_event,
)
from service.notifications.subscription_record import (
    Kept,
    SubscriptionsRecord,
    parse_record,
    render_record,
)
from service.notifications.subscriptions import Action, decide, mail_missed, wanted_subscriptions
from service.storage.local import LocalBackend

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
URL = "https://agent.example.com/graph/notifications"
CHAT, MAIL = wanted_subscriptions("agent-1", URL, URL)


def kept(kind: Source, sub_id: str, *, left: timedelta, url: str = URL) -> Kept:
    resource = CHAT.resource if kind is Source.CHAT else MAIL.resource
    return Kept(sub_id, resource, NOW + left, url)


def event(sub_id: str, name: str) -> LifecycleEvent:
    return LifecycleEvent(sub_id, name, NOW)


def actions(
    kept_now: dict[Source, Kept], events: tuple[LifecycleEvent, ...] = ()
) -> dict[Source, Action]:
    return {d.wanted.kind: d.action for d in decide((CHAT, MAIL), kept_now, events, NOW)}


def test_the_wanted_subscriptions_are_the_agents_chats_and_inbox_within_graphs_lifetimes() -> None:
    assert (
        CHAT.resource == "/users/agent-1/chats/getAllMessages"
        and CHAT.change_type == "created,updated"
    )
    assert (
        MAIL.resource == "/users/agent-1/mailFolders('Inbox')/messages"
        and MAIL.change_type == "created"
    )
    assert timedelta(hours=1) < CHAT.lifetime < timedelta(minutes=4320)
    assert timedelta(minutes=4320) < MAIL.lifetime < timedelta(minutes=10080)


def test_nothing_kept_means_both_are_created() -> None:
    assert actions({}) == {Source.CHAT: Action.CREATE, Source.EMAIL: Action.CREATE}


def test_a_fresh_subscription_is_left_alone_and_one_past_half_its_lifetime_is_renewed() -> None:
    fresh = {
        Source.CHAT: kept(Source.CHAT, "c", left=CHAT.lifetime - timedelta(minutes=5)),
        Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime / 2 - timedelta(minutes=1)),
    }
    assert actions(fresh) == {Source.EMAIL: Action.RENEW}


def test_an_expired_subscription_is_recreated_since_graph_deletes_it_without_notice() -> None:
    assert (
        actions(
            {
                Source.CHAT: kept(Source.CHAT, "c", left=timedelta(0)),
                Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime),
            }
        )[Source.CHAT]
        is Action.RECREATE
    )


def test_subscription_removed_recreates_and_reauthorization_required_reauthorizes() -> None:
    now_kept = {
        Source.CHAT: kept(Source.CHAT, "c", left=CHAT.lifetime),
        Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert actions(
        now_kept, (event("c", "subscriptionRemoved"), event("m", "reauthorizationRequired"))
    ) == {Source.CHAT: Action.RECREATE, Source.EMAIL: Action.REAUTHORIZE}


def test_a_renewal_due_answers_reauthorization_too() -> None:
    due = {Source.CHAT: kept(Source.CHAT, "c", left=timedelta(hours=1))}
    assert actions(due, (event("c", "reauthorizationRequired"),))[Source.CHAT] is Action.RENEW


def test_events_about_a_former_subscription_change_nothing() -> None:
    now_kept = {
        Source.CHAT: kept(Source.CHAT, "c2", left=CHAT.lifetime),
        Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert (
        actions(
            now_kept, (event("c1", "subscriptionRemoved"), event("c1", "reauthorizationRequired"))
        )
        == {}
    )


def test_a_subscription_for_another_url_is_recreated() -> None:
    moved = {
        Source.CHAT: kept(
            Source.CHAT, "c", left=CHAT.lifetime, url="https://old.example.com/graph/notifications"
        ),
        Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert actions(moved) == {Source.CHAT: Action.RECREATE}


def test_only_a_missed_on_the_kept_inbox_nudges_an_email_cycle() -> None:
    now_kept = {Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime)}
    assert mail_missed(now_kept, [event("m", "missed")])
    assert not mail_missed(
        now_kept, [event("old", "missed"), event("m", "reauthorizationRequired")]
    )


def test_the_record_round_trips_and_a_corrupt_one_is_refused() -> None:
    record = SubscriptionsRecord(
        {
            Source.CHAT: kept(Source.CHAT, "c", left=CHAT.lifetime),
            Source.EMAIL: kept(Source.EMAIL, "m", left=MAIL.lifetime),
        },
        lifecycle_offset=42,
    )
    assert parse_record(render_record(record)) == record
    with pytest.raises(CorruptValueError):
        parse_record('{"lifecycle_offset": -1, "subscriptions": {}}')
    with pytest.raises(ValueError):
        parse_record('{"lifecycle_offset": 0, "subscriptions": {"chat": {"id": "c"}}}')


async def test_lifecycle_events_are_read_once_past_the_recorded_offset(tmp_path) -> None:
    backend = LocalBackend(tmp_path / "store")
    assert await read_events(backend, 0) == ([], 0)
    await record_event(backend, event("c", "subscriptionRemoved"))
    first, offset = await read_events(backend, 0)
    await record_event(backend, event("m", "missed"))
    second, end = await read_events(backend, offset)
    assert [e.event for e in first] == ["subscriptionRemoved"] and [e.event for e in second] == [
        "missed"
    ]
    assert await read_events(backend, end) == ([], end)
    assert (
        parse_event_line(render_event(event("x", "bogus"))) is None
        and parse_event_line("{torn") is None
    )
