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
    CHAT_KEY,
    MAIL_KEY,
    Kept,
    SubscriptionKey,
    channel_key,
    SubscriptionsRecord,
    parse_record,
    render_record,
)
from service.notifications.subscription_plan import (
    Action,
    ChannelPlan,
    Wanted,
    decide,
    mail_missed,
    unwanted,
    wanted_subscriptions,
)
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
    kept_now: dict[SubscriptionKey, Kept], events: tuple[LifecycleEvent, ...] = ()
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
        CHAT_KEY: kept(Source.CHAT, "c", left=CHAT.lifetime - timedelta(minutes=5)),
        MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime / 2 - timedelta(minutes=1)),
    }
    assert actions(fresh) == {Source.EMAIL: Action.RENEW}


def test_an_expired_subscription_is_recreated_since_graph_deletes_it_without_notice() -> None:
    assert (
        actions(
            {
                CHAT_KEY: kept(Source.CHAT, "c", left=timedelta(0)),
                MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime),
            }
        )[Source.CHAT]
        is Action.RECREATE
    )


def test_subscription_removed_recreates_and_reauthorization_required_reauthorizes() -> None:
    now_kept = {
        CHAT_KEY: kept(Source.CHAT, "c", left=CHAT.lifetime),
        MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert actions(
        now_kept, (event("c", "subscriptionRemoved"), event("m", "reauthorizationRequired"))
    ) == {Source.CHAT: Action.RECREATE, Source.EMAIL: Action.REAUTHORIZE}


def test_a_renewal_due_answers_reauthorization_too() -> None:
    due = {CHAT_KEY: kept(Source.CHAT, "c", left=timedelta(hours=1))}
    assert actions(due, (event("c", "reauthorizationRequired"),))[Source.CHAT] is Action.RENEW


def test_events_about_a_former_subscription_change_nothing() -> None:
    now_kept = {
        CHAT_KEY: kept(Source.CHAT, "c2", left=CHAT.lifetime),
        MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert (
        actions(
            now_kept, (event("c1", "subscriptionRemoved"), event("c1", "reauthorizationRequired"))
        )
        == {}
    )


def test_a_subscription_for_another_url_is_recreated() -> None:
    moved = {
        CHAT_KEY: kept(
            Source.CHAT, "c", left=CHAT.lifetime, url="https://old.example.com/graph/notifications"
        ),
        MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime),
    }
    assert actions(moved) == {Source.CHAT: Action.RECREATE}


def test_only_a_missed_on_the_kept_inbox_nudges_an_email_cycle() -> None:
    now_kept = {MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime)}
    assert mail_missed(now_kept, [event("m", "missed")])
    assert not mail_missed(
        now_kept, [event("old", "missed"), event("m", "reauthorizationRequired")]
    )


def test_the_record_round_trips_and_a_corrupt_one_is_refused() -> None:
    record = SubscriptionsRecord(
        {
            CHAT_KEY: kept(Source.CHAT, "c", left=CHAT.lifetime),
            MAIL_KEY: kept(Source.EMAIL, "m", left=MAIL.lifetime),
        },
        lifecycle_offset=42,
    )
    assert parse_record(render_record(record)) == record
    with pytest.raises(CorruptValueError):
        parse_record('{"lifecycle_offset": -1, "subscriptions": {}}')
    with pytest.raises(ValueError):
        parse_record('{"lifecycle_offset": 0, "subscriptions": {"chat": {"id": "c"}}}')


TEAM = "00000000-0000-0000-0000-0000000000aa"
GENERAL = f"{TEAM}/19:general@thread.tacv2"
RANDOM = f"{TEAM}/19:random@thread.tacv2"
PLAN = ChannelPlan(URL, URL, limit=200, creates_per_cycle=20)


def channel(conversation_id: str) -> str:
    return f"{TEAM}/19:{conversation_id}@thread.tacv2"


def kept_channel(wanted: Wanted, sub_id: str, *, left: timedelta) -> Kept:
    return Kept(sub_id, wanted.resource, NOW + left, URL)


def test_a_watched_channel_wants_its_own_messages_subscription_within_the_chat_lifetime() -> None:
    [general] = PLAN.wanted([GENERAL], ())
    assert general.key == channel_key(GENERAL) and general.kind is Source.CHANNEL
    assert general.resource == f"/teams/{TEAM}/channels/19:general@thread.tacv2/messages"
    assert general.change_type == "created,updated"  # a reply is a new message of the channel
    assert general.lifetime == CHAT.lifetime
    assert PLAN.wanted(["not-a-channel-id"], ()) == ()


def test_a_new_channel_is_created_and_a_kept_one_is_left_alone() -> None:
    general, random = PLAN.wanted([GENERAL, RANDOM], ())
    now_kept = {general.key: kept_channel(general, "g", left=CHAT.lifetime)}
    decisions = decide((general, random), now_kept, (), NOW)
    assert [(d.wanted.key, d.action) for d in decisions] == [(random.key, Action.CREATE)]


def test_a_removed_channel_subscription_is_recreated_and_only_its_own() -> None:
    general, random = PLAN.wanted([GENERAL, RANDOM], ())
    now_kept = {
        general.key: kept_channel(general, "g", left=CHAT.lifetime),
        random.key: kept_channel(random, "r", left=CHAT.lifetime),
    }
    decisions = decide((general, random), now_kept, (event("r", "subscriptionRemoved"),), NOW)
    assert [(d.wanted.key, d.action) for d in decisions] == [(random.key, Action.RECREATE)]


def test_a_channel_that_left_the_list_has_its_subscription_deleted() -> None:
    [general] = PLAN.wanted([GENERAL], ())
    [random] = PLAN.wanted([RANDOM], ())
    now_kept = {
        CHAT_KEY: kept(Source.CHAT, "c", left=CHAT.lifetime),
        general.key: kept_channel(general, "g", left=CHAT.lifetime),
        random.key: kept_channel(random, "r", left=CHAT.lifetime),
    }
    wanted = (CHAT, MAIL, *PLAN.wanted([GENERAL], now_kept))
    assert unwanted(wanted, now_kept, at_most=20) == [random.key]


def test_an_unreadable_channel_list_keeps_every_channel_subscription() -> None:
    general, random = PLAN.wanted([GENERAL, RANDOM], ())
    now_kept = {w.key: kept_channel(w, w.key.text, left=CHAT.lifetime) for w in (general, random)}
    assert PLAN.wanted(None, now_kept) == (general, random)
    assert unwanted((CHAT, MAIL, general, random), now_kept, at_most=20) == []


def test_channel_creations_are_paced_per_cycle_and_never_hold_back_chat_or_mail() -> None:
    many = PLAN.wanted([channel(f"c{i:03}") for i in range(50)], ())
    decisions = decide((CHAT, MAIL, *many), {}, (), NOW, channel_creates=20)
    assert [d.wanted.kind for d in decisions[:2]] == [Source.CHAT, Source.EMAIL]
    assert len(decisions) == 22 and all(d.action is Action.CREATE for d in decisions)
    # A renewal is not a creation: due channels renew even when the creation budget is spent.
    now_kept = {w.key: kept_channel(w, w.key.text, left=timedelta(hours=1)) for w in many[:30]}
    actions_now = [d.action for d in decide(many, now_kept, (), NOW, channel_creates=20)]
    assert actions_now.count(Action.RENEW) == 30 and actions_now.count(Action.CREATE) == 20


def test_channel_subscriptions_are_bounded_and_the_kept_ones_stay_when_the_list_grows() -> None:
    plan = ChannelPlan(URL, URL, limit=3)
    first = plan.wanted([channel("m"), channel("n"), channel("o")], ())
    now_kept = {w.key: kept_channel(w, w.key.text, left=CHAT.lifetime) for w in first}
    grown = [channel("a"), channel("b"), channel("m"), channel("n"), channel("o")]
    assert plan.wanted(grown, now_kept) == first  # "a" and "b" sort first but wait for room
    assert ChannelPlan(URL, URL, limit=0).wanted(grown, ()) == ()
    deletions = unwanted((), now_kept, at_most=2)
    assert len(deletions) == 2  # deletions are paced too


def test_a_record_written_before_channels_reads_back_unchanged_and_keeps_its_subscriptions() -> (
    None
):
    old = (
        '{"lifecycle_offset": 7, "subscriptions": {'
        '"chat": {"expires_at": "2026-12-03T11:00:00Z", "id": "c", '
        '"notification_url": "%s", "resource": "/users/agent-1/chats/getAllMessages"}, '
        '"mail": {"expires_at": "2026-12-07T11:00:00Z", "id": "m", '
        '"notification_url": "%s", "resource": "/users/agent-1/mailFolders(\'Inbox\')/messages"}'
        "}}" % (URL, URL)
    )
    record = parse_record(old)
    assert {k: v.id for k, v in record.kept.items()} == {CHAT_KEY: "c", MAIL_KEY: "m"}
    assert record.lifecycle_offset == 7
    assert decide((CHAT, MAIL), record.kept, (), NOW) == []  # nothing recreated
    assert parse_record(render_record(record)) == record


def test_channel_entries_round_trip_and_unknown_keys_are_left_out() -> None:
    [general] = PLAN.wanted([GENERAL], ())
    record = SubscriptionsRecord(
        {
            CHAT_KEY: kept(Source.CHAT, "c", left=CHAT.lifetime),
            general.key: kept_channel(general, "g", left=CHAT.lifetime),
        }
    )
    text = render_record(record)
    assert f'"channel:{GENERAL}"' in text
    assert parse_record(text) == record
    for unknown in ("teams", "channel", "channel:", "chat:x", "mail:y"):
        assert SubscriptionKey.parse(unknown) is None, unknown


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
