"""Conformance: creating, reading, renewing and deleting change-notification subscriptions with
Graph's rules (handshake, token types, lifetimes, quotas, loopback URLs, expiry), over real HTTP with
a real loopback webhook receiver."""

from __future__ import annotations

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ManualClock, RunningEmulator, Seed, build_seed, start_emulator
from emulator.subscription_policy import SubscriptionPolicy
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer
from tests.emulator.notification_receiver import Receiver
from tests.emulator.subscription_kit import (  # noqa: F401  (fixtures)
    FAST,
    Admin,
    Subscriber,
    admin,
    agent_subscriber,
    chat_id,
    emu,
    entra_app_token,
    receiver,
    seed_with,
)


def _all_chats(seed: Seed) -> str:
    return f"/users/{seed.agent_user.id}/chats/getAllMessages"


def _inbox(seed: Seed) -> str:
    return f"/users/{seed.agent_user.id}/mailFolders('Inbox')/messages"


def test_the_default_policy_is_graphs_documented_contract() -> None:
    # The conformance tests run on FAST, which shortens the waits; the defaults every other tenant
    # gets must stay Graph's ("Receive change notifications through webhooks": a 10 s handshake, a
    # 3 s reply timeout, retries for up to 4 hours; the lifetime table: 4,320 min for chatMessage,
    # 10,080 for message; Teams: a lifecycleNotificationUrl beyond 1 hour).
    policy = build_seed().subscriptions
    assert policy == SubscriptionPolicy()
    assert (policy.validation_timeout_s, policy.notification_timeout_s, policy.retry_window_s) == (
        10.0,
        3.0,
        14400.0,
    )
    assert (
        policy.chat_max_minutes,
        policy.mail_max_minutes,
        policy.chat_without_lifecycle_max_minutes,
    ) == (4320, 10080, 60)
    # FAST changes only waits and the per-user quota, so the lifetime tests below check Graph's numbers.
    lifetimes = ("chat_max_minutes", "mail_max_minutes", "chat_without_lifecycle_max_minutes")
    assert {k: getattr(FAST, k) for k in lifetimes} == {k: getattr(policy, k) for k in lifetimes}


def test_handshake_echo_creates_the_subscription(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    sub = agent_subscriber.created(_all_chats(seed), receiver.url())
    assert sub["resource"] == _all_chats(seed) and sub["changeType"] == "created"
    assert sub["clientState"] == "s3cret-state" and sub["notificationUrl"] == receiver.url()
    assert sub["creatorId"] == seed.agent_user.id and sub["applicationId"] == seed.agent_identity.id
    [validation] = receiver.received("/notify")
    assert validation.validation_token and validation.validation_token.startswith(
        "Validation: "
    )  # URL-decoded
    assert validation.content_type.startswith("text/plain")
    assert [s["id"] for s in agent_subscriber.list()] == [sub["id"]]
    assert agent_subscriber.get(sub["id"]).json()["id"] == sub["id"]


def test_wrong_echo_refuses_the_create(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    receiver.validation["/notify"] = "wrong"
    response = agent_subscriber.create(_all_chats(seed), receiver.url())
    assert "exactly match" in assert_graph_error(response, 400, "ValidationError")["message"]
    assert agent_subscriber.list() == []


def test_echo_with_wrong_content_type_refuses_the_create(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    receiver.validation["/notify"] = "json"
    assert_graph_error(
        agent_subscriber.create(_all_chats(seed), receiver.url()), 400, "ValidationError"
    )


def test_handshake_timeout_refuses_the_create(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    receiver.validation["/notify"] = "slow"
    receiver.slow_s = FAST.validation_timeout_s + 3
    response = agent_subscriber.create(_all_chats(seed), receiver.url())
    assert "timeout" in assert_graph_error(response, 400, "ValidationError")["message"]
    assert agent_subscriber.list() == []


def test_unreachable_endpoint_refuses_the_create(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    url = receiver.url()
    receiver.stop()
    assert_graph_error(agent_subscriber.create(_all_chats(seed), url), 400, "ValidationError")


def test_lifecycle_url_is_validated_too(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    receiver.validation["/lifecycle"] = "wrong"
    response = agent_subscriber.create(
        _all_chats(seed), receiver.url(), lifecycle_url=receiver.url("/lifecycle")
    )
    assert_graph_error(response, 400, "ValidationError")


def test_chat_subscription_beyond_an_hour_needs_a_lifecycle_url(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    response = agent_subscriber.create(_all_chats(seed), receiver.url(), minutes=61)
    assert (
        "lifecycleNotificationUrl is required"
        in assert_graph_error(response, 400, "InvalidRequest")["message"]
    )
    agent_subscriber.created(
        _all_chats(seed), receiver.url(), minutes=61, lifecycle_url=receiver.url("/lc")
    )


def test_chat_subscription_lives_at_most_4320_minutes(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    response = agent_subscriber.create(
        _all_chats(seed), receiver.url(), minutes=4321, lifecycle_url=receiver.url()
    )
    assert "4320 minutes" in assert_graph_error(response, 400, "InvalidRequest")["message"]
    agent_subscriber.created(
        _all_chats(seed), receiver.url(), minutes=4320, lifecycle_url=receiver.url()
    )


def test_mail_subscription_lives_at_most_10080_minutes(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    response = agent_subscriber.create(_inbox(seed), receiver.url(), minutes=10081)
    assert "10080 minutes" in assert_graph_error(response, 400, "InvalidRequest")["message"]
    agent_subscriber.created(_inbox(seed), receiver.url(), minutes=10080)


def test_expiration_in_the_past_is_refused(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    assert_graph_error(
        agent_subscriber.create(_inbox(seed), receiver.url(), minutes=-1), 400, "InvalidRequest"
    )


def test_per_user_quota_on_all_chats(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    for n in range(FAST.per_user_chat_quota):
        agent_subscriber.created(_all_chats(seed), receiver.url(), client_state=f"n{n}")
    response = agent_subscriber.create(_all_chats(seed), receiver.url())
    assert "quota" in assert_graph_error(response, 403, "ExtensionError")["message"]


def test_one_subscription_per_app_and_chat(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    resource = f"/chats/{chat_id(seed, 1)}/messages"
    agent_subscriber.created(resource, receiver.url())
    assert_graph_error(agent_subscriber.create(resource, receiver.url()), 403, "ExtensionError")


def test_delegated_token_subscribes_only_to_its_own_user(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    response = agent_subscriber.create(
        f"/users/{seed.humans[0].id}/chats/getAllMessages", receiver.url()
    )
    assert_graph_error(response, 403, "ExtensionError")
    assert_graph_error(
        agent_subscriber.create(
            f"/users/{seed.humans[0].id}/mailFolders('Inbox')/messages", receiver.url()
        ),
        403,
        "ExtensionError",
    )


def test_me_resolves_to_the_signed_in_user(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    agent_subscriber.created("/me/chats/getAllMessages", receiver.url())


def test_non_member_cannot_subscribe_to_a_chat(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, receiver: Receiver, seed: Seed
) -> None:
    grace = bearer(entra.human_token(seed.humans[1].user_principal_name))
    response = Subscriber(emu, http, grace).create(
        f"/chats/{chat_id(seed, 2)}/messages", receiver.url()
    )
    assert_graph_error(response, 403, "Forbidden")


def test_app_only_token_with_chat_read_all_subscribes_to_a_users_chats(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, receiver: Receiver, seed: Seed
) -> None:
    app = Subscriber(emu, http, bearer(entra_app_token(entra)))
    sub = app.created(_all_chats(seed), receiver.url())
    assert sub["creatorId"] == seed.agent_identity.id
    assert [s["id"] for s in app.list()] == [sub["id"]]
    ada = Subscriber(emu, http, bearer(entra.human_token(seed.humans[0].user_principal_name)))
    assert ada.list() == []  # another app's subscriptions are not listed
    assert_graph_error(ada.get(sub["id"]), 404, "ResourceNotFound")


def test_token_without_the_permission_is_refused(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, receiver: Receiver, seed: Seed
) -> None:
    token = entra.agent_token(scope="https://graph.microsoft.com/User.Read")
    response = Subscriber(emu, http, bearer(token)).create(_all_chats(seed), receiver.url())
    assert "Chat.Read" in assert_graph_error(response, 403, "ExtensionError")["message"]


def test_notification_url_must_be_loopback(agent_subscriber: Subscriber, seed: Seed) -> None:
    response = agent_subscriber.create(_all_chats(seed), "https://webhook.contoso.example/notify")
    assert "loopback" in assert_graph_error(response, 400, "InvalidRequest")["message"]


@pytest.mark.parametrize(
    ("switch", "says"),
    [({"allow_loopback_http": False}, "https"), ({"enabled": False}, "switched off")],
)
def test_seed_switches_refuse_the_create(
    switch: dict[str, bool],
    says: str,
    seed: Seed,
    clock: ManualClock,
    signing_key: rsa.RSAPrivateKey,
    http: httpx.Client,
    receiver: Receiver,
) -> None:
    strict = seed_with(seed, FAST.model_copy(update=switch))
    with start_emulator(strict, clock=clock, signing_key=signing_key) as running:
        subscriber = Subscriber(running, http, bearer(Entra(running, http).agent_token()))
        response = subscriber.create(_all_chats(seed), receiver.url())
        assert says in assert_graph_error(response, 400, "InvalidRequest")["message"]


def test_rich_notifications_are_refused(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    response = agent_subscriber.create(_all_chats(seed), receiver.url(), includeResourceData=True)
    assert_graph_error(response, 400, "InvalidRequest")


def test_renew_moves_the_expiration(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    sub = agent_subscriber.created(_inbox(seed), receiver.url(), minutes=30)
    response = agent_subscriber.renew(sub["id"], minutes=600)
    assert response.status_code == 200, response.text
    assert response.json()["expirationDateTime"] > sub["expirationDateTime"]
    assert (
        agent_subscriber.get(sub["id"]).json()["expirationDateTime"]
        == response.json()["expirationDateTime"]
    )
    assert_graph_error(agent_subscriber.renew(sub["id"], minutes=10081), 400, "InvalidRequest")


def test_renewing_a_chat_subscription_past_an_hour_needs_a_lifecycle_url(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    sub = agent_subscriber.created(_all_chats(seed), receiver.url(), minutes=30)
    assert_graph_error(agent_subscriber.renew(sub["id"], minutes=120), 400, "InvalidRequest")


def test_delete_removes_the_subscription(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed
) -> None:
    sub = agent_subscriber.created(_inbox(seed), receiver.url())
    assert agent_subscriber.delete(sub["id"]).status_code == 204
    assert_graph_error(agent_subscriber.get(sub["id"]), 404, "ResourceNotFound")
    assert_graph_error(agent_subscriber.delete(sub["id"]), 404, "ResourceNotFound")
    assert agent_subscriber.list() == []


def test_subscription_expires_on_the_tenant_clock(
    agent_subscriber: Subscriber, receiver: Receiver, seed: Seed, admin: Admin, entra: Entra
) -> None:
    sub = agent_subscriber.created(_inbox(seed), receiver.url(), minutes=45)
    admin.post("/clock", {"seconds": 44 * 60})
    assert agent_subscriber.get(sub["id"]).status_code == 200
    admin.post("/clock", {"seconds": 61})
    agent_subscriber.headers = bearer(entra.agent_token())  # the first token has expired meanwhile
    assert_graph_error(agent_subscriber.get(sub["id"]), 404, "ResourceNotFound")
    assert agent_subscriber.list() == []
