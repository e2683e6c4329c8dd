"""Conformance: change notifications as Graph delivers them (batched {"value": [...]}, basic
resourceData, clientState), retries of non-2xx and slow replies within a bounded window, lifecycle
notifications, and the admin's faults and pause, over real HTTP to a real loopback receiver."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from emulator import RunningEmulator, Seed
from tests.emulator.emulator_testkit import Entra, bearer
from tests.emulator.notification_receiver import Receiver, Reply
from tests.emulator.subscription_kit import (  # noqa: F401  (fixtures)
    FAST,
    Admin,
    Subscriber,
    admin,
    agent_subscriber,
    chat_id,
    emu,
    receiver,
)


def _all_chats(seed: Seed) -> str:
    return f"/users/{seed.agent_user.id}/chats/getAllMessages"


def _inbox(seed: Seed) -> str:
    return f"/users/{seed.agent_user.id}/mailFolders('Inbox')/messages"


def _posts(receiver: Receiver, path: str = "/notify") -> list[list[dict[str, Any]]]:
    return [r.body["value"] for r in receiver.received(path) if r.validation_token is None]


def _ids(receiver: Receiver, path: str = "/notify") -> list[str]:
    return [n["resourceData"]["id"] for n in receiver.notifications(path)]


def _lifecycle_events(receiver: Receiver, path: str = "/lc") -> list[str]:
    return [n["lifecycleEvent"] for n in receiver.notifications(path)]


def test_graph_post_notifies_every_covering_subscription_in_one_batch(
    emu: RunningEmulator,
    http: httpx.Client,
    entra: Entra,
    agent_subscriber: Subscriber,
    receiver: Receiver,
    seed: Seed,
) -> None:
    chat = chat_id(seed, 1)
    everything = agent_subscriber.created(_all_chats(seed), receiver.url(), client_state="all")
    one_chat = agent_subscriber.created(
        f"/chats/{chat}/messages", receiver.url(), client_state="one"
    )
    ada = bearer(entra.human_token(seed.humans[0].user_principal_name))
    posted = http.post(
        f"{emu.graph_url}/chats/{chat}/messages",
        headers=ada,
        json={"body": {"contentType": "text", "content": "ping"}},
    )
    assert posted.status_code == 201, posted.text
    message_id = posted.json()["id"]
    receiver.wait_for(lambda: len(receiver.notifications()) == 2, "two notifications")
    [batch] = _posts(receiver)  # one change, two subscriptions, one POST
    by_sub = {n["subscriptionId"]: n for n in batch}
    for sub, state in ((everything, "all"), (one_chat, "one")):
        item = by_sub[sub["id"]]
        assert item["changeType"] == "created" and item["clientState"] == state
        assert item["tenantId"] == seed.tenant_id
        assert item["subscriptionExpirationDateTime"] == sub["expirationDateTime"]
        assert item["resource"] == f"chats('{chat}')/messages('{message_id}')"
        assert item["resourceData"] == {
            "id": message_id,
            "@odata.type": "#Microsoft.Graph.chatMessage",
            "@odata.id": item["resource"],
        }


def test_a_chat_outside_the_subscription_is_not_notified(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url(), client_state="all")
    agent_subscriber.created(
        f"/chats/{chat_id(seed, 1)}/messages", receiver.url(), client_state="one"
    )
    message = admin.message(chat_id(seed, 2), seed.humans[0].id)  # injected, in the other chat
    receiver.wait_for(lambda: len(receiver.notifications()) >= 1, "a notification")
    [batch] = _posts(receiver)
    assert [(n["clientState"], n["resourceData"]["id"]) for n in batch] == [("all", message["id"])]


def test_mail_arriving_in_the_inbox_notifies(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_inbox(seed), receiver.url())
    mail = admin.mail(seed.agent_user.user_principal_name)
    receiver.wait_for(lambda: len(receiver.notifications()) == 1, "a mail notification")
    [item] = receiver.notifications()
    assert item["resource"] == f"Users/{seed.agent_user.id}/Messages/{mail['id']}"
    assert (
        item["resourceData"]["id"] == mail["id"]
        and item["resourceData"]["@odata.type"] == "#Microsoft.Graph.Message"
    )
    assert item["resourceData"]["@odata.etag"] == f'W/"{mail["changeKey"]}"'


def test_deleted_and_expired_subscriptions_get_nothing(
    emu: RunningEmulator,
    http: httpx.Client,
    entra: Entra,
    agent_subscriber: Subscriber,
    receiver: Receiver,
    admin: Admin,
    seed: Seed,
) -> None:
    deleted = agent_subscriber.created(_inbox(seed), receiver.url(), client_state="deleted")
    agent_subscriber.created(_inbox(seed), receiver.url(), minutes=50, client_state="expires")
    agent_subscriber.created(_inbox(seed), receiver.url(), minutes=120, client_state="lives")
    assert agent_subscriber.delete(deleted["id"]).status_code == 204
    admin.post("/clock", {"seconds": 51 * 60})
    admin.mail(seed.agent_user.user_principal_name)
    receiver.wait_for(lambda: len(receiver.notifications()) >= 1, "a notification")
    [batch] = _posts(receiver)  # one change: every subscription it reached shares this POST
    assert [n["clientState"] for n in batch] == ["lives"]


def test_non_2xx_replies_are_retried_until_accepted(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_inbox(seed), receiver.url())
    receiver.script["/notify"].extend([Reply(500), Reply(503)])
    mail = admin.mail(seed.agent_user.user_principal_name)
    receiver.wait_for(lambda: len(receiver.notifications()) == 3, "three attempts")
    assert _ids(receiver) == [mail["id"]] * 3
    admin.wait_until(lambda v: v["stats"].get("sent") == 1, "the notification to count as sent")
    stats = admin.stats()
    assert stats["retried"] == 2 and "failed" not in stats


def test_a_reply_slower_than_the_timeout_is_retried(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_inbox(seed), receiver.url())
    receiver.script["/notify"].append(Reply(202, delay_s=FAST.notification_timeout_s + 2))
    admin.mail(seed.agent_user.user_principal_name)
    admin.wait_until(
        lambda v: v["stats"].get("sent") == 1, "the retried notification to be accepted"
    )
    assert len(receiver.notifications()) >= 2 and admin.stats()["retried"] >= 1


def test_delivery_gives_up_after_the_retry_window(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_inbox(seed), receiver.url(), lifecycle_url=receiver.url("/lc"))
    receiver.script["/notify"].extend([Reply(500)] * 1000)
    admin.mail(seed.agent_user.user_principal_name)
    admin.wait_until(lambda v: v["stats"].get("failed") == 1, "the notification to fail for good")
    assert len(receiver.notifications()) >= 2
    # A lost mail notification is announced to the lifecycle URL (Outlook resources only).
    receiver.wait_for(
        lambda: _lifecycle_events(receiver) == ["missed"], "a missed lifecycle notification"
    )


def test_dropped_mail_notification_raises_missed(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    sub = agent_subscriber.created(_inbox(seed), receiver.url(), lifecycle_url=receiver.url("/lc"))
    admin.post("/notifications/faults", {"action": "drop", "count": 1})
    admin.mail(seed.agent_user.user_principal_name)
    receiver.wait_for(
        lambda: len(receiver.notifications("/lc")) == 1, "a missed lifecycle notification"
    )
    [item] = receiver.notifications("/lc")
    assert item["lifecycleEvent"] == "missed" and item["subscriptionId"] == sub["id"]
    assert item["clientState"] == "s3cret-state" and item["tenantId"] == seed.tenant_id
    assert receiver.notifications() == [] and admin.stats()["dropped"] == 1


def test_admin_drop_loses_only_the_chosen_notification(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url())
    admin.post("/notifications/faults", {"action": "drop", "count": 1})
    first = admin.message(chat_id(seed, 1), seed.humans[0].id, "first")
    second = admin.message(chat_id(seed, 1), seed.humans[0].id, "second")
    receiver.wait_for(lambda: second["id"] in _ids(receiver), "the second notification")
    assert first["id"] not in _ids(receiver)
    assert admin.stats()["dropped"] == 1


def test_admin_duplicate_sends_twice(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url())
    admin.post("/notifications/faults", {"action": "duplicate", "count": 1})
    message = admin.message(chat_id(seed, 1), seed.humans[0].id)
    receiver.wait_for(lambda: _ids(receiver) == [message["id"]] * 2, "the notification twice")
    assert len(_posts(receiver)) == 2 and admin.stats()["duplicated"] == 1


@pytest.mark.parametrize(
    ("rule", "counted"),
    [
        (
            {"action": "delay", "count": 1, "delay_ms": 3000},
            "delayed",
        ),  # overtaken by a later notification
        ({"action": "reorder", "count": 1}, "reordered"),  # held back until the next batch has gone
    ],
)
def test_admin_delay_and_reorder_let_a_later_notification_arrive_first(
    rule: dict[str, Any],
    counted: str,
    agent_subscriber: Subscriber,
    receiver: Receiver,
    admin: Admin,
    seed: Seed,
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url())
    admin.post("/notifications/faults", rule)
    first = admin.message(chat_id(seed, 1), seed.humans[0].id, "first")
    second = admin.message(chat_id(seed, 1), seed.humans[0].id, "second")
    receiver.wait_for(lambda: len(_ids(receiver)) == 2, "both notifications")
    assert _ids(receiver) == [second["id"], first["id"]] and admin.stats()[counted] == 1


def test_pause_holds_delivery_until_resume(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url())
    admin.post("/notifications/pause")
    message = admin.message(chat_id(seed, 1), seed.humans[0].id)
    admin.wait_until(lambda v: v["waiting_batches"] == 1, "the batch to wait on the pause")
    assert receiver.notifications() == []
    admin.post("/notifications/resume")
    receiver.wait_for(lambda: _ids(receiver) == [message["id"]], "the held notification")


def test_forced_subscription_removed_notifies_and_deletes(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    sub = agent_subscriber.created(
        _all_chats(seed), receiver.url(), lifecycle_url=receiver.url("/lc")
    )
    assert (
        admin.post(f"/subscriptions/{sub['id']}/lifecycle", {"event": "subscriptionRemoved"})[
            "sent"
        ]
        is True
    )
    receiver.wait_for(
        lambda: _lifecycle_events(receiver) == ["subscriptionRemoved"], "subscriptionRemoved"
    )
    assert agent_subscriber.get(sub["id"]).status_code == 404


def test_missed_is_not_sent_for_chat_messages(
    emu: RunningEmulator,
    http: httpx.Client,
    agent_subscriber: Subscriber,
    receiver: Receiver,
    seed: Seed,
) -> None:
    sub = agent_subscriber.created(
        _all_chats(seed), receiver.url(), lifecycle_url=receiver.url("/lc")
    )
    response = http.post(
        f"{emu.admin_url}/subscriptions/{sub['id']}/lifecycle", json={"event": "missed"}
    )
    assert response.status_code == 400


def test_forced_reauthorization_pauses_delivery_until_reauthorized(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    sub = agent_subscriber.created(
        _all_chats(seed), receiver.url(), lifecycle_url=receiver.url("/lc")
    )
    admin.post(f"/subscriptions/{sub['id']}/lifecycle", {"event": "reauthorizationRequired"})
    receiver.wait_for(
        lambda: _lifecycle_events(receiver) == ["reauthorizationRequired"], "the challenge"
    )
    admin.message(chat_id(seed, 1), seed.humans[0].id, "lost")
    admin.wait_until(
        lambda v: v["stats"].get("suppressed_awaiting_reauthorization") == 1,
        "the change to be lost",
    )
    assert agent_subscriber.reauthorize(sub["id"]).status_code == 204
    after = admin.message(chat_id(seed, 1), seed.humans[0].id, "after")
    receiver.wait_for(lambda: _ids(receiver) == [after["id"]], "delivery to resume")


def test_token_near_expiry_raises_reauthorization_required(
    entra: Entra, agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    sub = agent_subscriber.created(
        _all_chats(seed), receiver.url(), minutes=4000, lifecycle_url=receiver.url("/lc")
    )
    lead = FAST.reauthorize_lead_s
    admin.post(
        "/clock", {"seconds": seed.token_lifetime_s - lead + 1}
    )  # within the lead of the token's expiry
    receiver.wait_for(
        lambda: _lifecycle_events(receiver) == ["reauthorizationRequired"], "the challenge"
    )
    admin.post("/clock", {"seconds": lead})  # the token has now expired: delivery pauses
    admin.message(chat_id(seed, 1), seed.humans[0].id, "lost")
    admin.wait_until(
        lambda v: v["stats"].get("suppressed_awaiting_reauthorization") == 1,
        "the change to be lost",
    )
    agent_subscriber.headers = bearer(entra.agent_token())
    renewed = agent_subscriber.renew(sub["id"], minutes=4000)  # a renewal reauthorizes too
    assert renewed.status_code == 200, renewed.text
    after = admin.message(chat_id(seed, 1), seed.humans[0].id, "after")
    receiver.wait_for(lambda: _ids(receiver) == [after["id"]], "delivery to resume")


def test_changes_within_the_latency_share_one_post(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_all_chats(seed), receiver.url())
    admin.post("/notifications/latency", {"latency_ms": 3000})  # a batch stays open this long
    first = admin.message(chat_id(seed, 1), seed.humans[0].id, "first")
    second = admin.message(chat_id(seed, 2), seed.humans[0].id, "second")
    receiver.wait_for(lambda: len(_ids(receiver)) == 2, "both notifications")
    assert [[n["resourceData"]["id"] for n in batch] for batch in _posts(receiver)] == [
        [first["id"], second["id"]]
    ]


def _heard(receiver: Receiver, path: str) -> list[tuple[str, str]]:
    return sorted((n["changeType"], n["resourceData"]["id"]) for n in receiver.notifications(path))


def test_edits_and_reactions_are_updated_and_soft_deletes_deleted(
    emu: RunningEmulator,
    http: httpx.Client,
    agent_subscriber: Subscriber,
    receiver: Receiver,
    admin: Admin,
    seed: Seed,
) -> None:
    chat = chat_id(seed, 1)
    agent_subscriber.created(_all_chats(seed), receiver.url("/updated"), change_type="updated")
    agent_subscriber.created(_all_chats(seed), receiver.url("/deleted"), change_type="deleted")
    agent_subscriber.created(
        f"/chats/{chat}/messages", receiver.url("/created"), change_type="created"
    )
    message = admin.message(chat, seed.humans[0].id, "to be changed")
    base = f"{emu.admin_url}/chats/{chat}/messages/{message['id']}"
    assert http.patch(base, json={"content": "edited"}).status_code == 200
    assert (
        http.post(
            f"{base}/reactions", json={"user": seed.humans[1].id, "reaction_type": "heart"}
        ).status_code
        == 201
    )
    assert http.delete(base).status_code == 200
    sentinel = admin.message(chat, seed.humans[0].id, "after the changes")
    # Five notifications are due: the two creations, the edit and the reaction, the delete. A wrong
    # one to any subscription makes a sixth, so the exact lists below fail whichever arrives first.
    receiver.wait_for(
        lambda: (
            sum(len(receiver.notifications(p)) for p in ("/updated", "/deleted", "/created")) >= 5
        ),
        "five notifications",
    )
    assert (
        _heard(receiver, "/updated") == [("updated", message["id"])] * 2
    )  # the edit and the reaction
    assert _heard(receiver, "/deleted") == [("deleted", message["id"])]
    assert _heard(receiver, "/created") == sorted(
        [("created", message["id"]), ("created", sentinel["id"])]
    )


def test_retry_backoff_grows_by_the_factor_up_to_its_cap(
    agent_subscriber: Subscriber, receiver: Receiver, admin: Admin, seed: Seed
) -> None:
    agent_subscriber.created(_inbox(seed), receiver.url())
    receiver.script["/notify"].extend([Reply(500)] * 4)
    admin.mail(seed.agent_user.user_principal_name)
    admin.wait_until(
        lambda v: v["stats"].get("sent") == 1,
        "the notification to be accepted on the fifth attempt",
    )
    # The waits the engine took between the five attempts: doubled from the initial one, capped.
    initial, cap = FAST.retry_initial_s, FAST.retry_max_backoff_s
    assert initial * 4 == cap  # the policy under test: 0.05, 0.1, 0.2, then the cap
    [waits] = admin.notifications()["retry_waits_s"]
    assert waits == [initial, initial * 2, initial * 4, cap]
    # And they were waited: each gap between attempts is at least the wait before it (a lower bound
    # only, which a loaded machine cannot break; no upper bound is asserted).
    arrivals = [r.at for r in receiver.received("/notify") if r.validation_token is None]
    assert len(arrivals) == 5
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    assert all(gap >= wait - 0.005 for gap, wait in zip(gaps, waits)), (gaps, waits)
