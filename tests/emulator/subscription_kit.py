"""Fixtures for the change-notification conformance tests: an emulator whose seed shortens Graph's
waits (so a handshake timeout or a retry window passes quickly), a loopback webhook receiver, and a
client that creates subscriptions the way an app does. Import the fixtures into a test module."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ManualClock, RunningEmulator, Seed, start_emulator
from emulator.subscription_policy import SubscriptionPolicy
from tests.emulator.emulator_testkit import Entra
from tests.emulator.notification_receiver import Receiver

# Graph's rules, with the waits that would make tests slow shortened (10 s handshake, 4 h retry window);
# the 3 s reply timeout stays, so a loaded machine does not turn a normal reply into a retry.
FAST = SubscriptionPolicy(
    validation_timeout_s=5.0,
    notification_timeout_s=3.0,
    retry_initial_s=0.05,
    retry_max_backoff_s=0.2,
    retry_window_s=7.0,
    per_user_chat_quota=2,
)


def seed_with(seed: Seed, policy: SubscriptionPolicy) -> Seed:
    data = seed.model_dump()
    data["subscriptions"] = policy.model_dump()
    data["agent_identities"][0]["app_roles"] = ["Chat.Read.All", "Mail.Read"]
    return Seed.model_validate(data)


@pytest.fixture
def emu(
    seed: Seed, clock: ManualClock, signing_key: rsa.RSAPrivateKey
) -> Iterator[RunningEmulator]:
    with start_emulator(seed_with(seed, FAST), clock=clock, signing_key=signing_key) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    yield running
    running.stop()


@dataclass
class Subscriber:
    """Graph's /subscriptions as an app calls it, with one token."""

    emu: RunningEmulator
    http: httpx.Client
    headers: dict[str, str]

    def create(
        self,
        resource: str,
        notification_url: str,
        *,
        minutes: float = 30,
        lifecycle_url: str | None = None,
        client_state: str | None = "s3cret-state",
        change_type: str = "created",
        **extra: Any,
    ) -> httpx.Response:
        body: dict[str, Any] = {
            "changeType": change_type,
            "notificationUrl": notification_url,
            "resource": resource,
            "expirationDateTime": _iso(self.emu, minutes),
            "clientState": client_state,
            **extra,
        }
        if lifecycle_url is not None:
            body["lifecycleNotificationUrl"] = lifecycle_url
        return self.http.post(
            f"{self.emu.graph_url}/subscriptions", json=body, headers=self.headers
        )

    def created(self, resource: str, notification_url: str, **kwargs: Any) -> dict[str, Any]:
        response = self.create(resource, notification_url, **kwargs)
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, sub_id: str) -> httpx.Response:
        return self.http.get(f"{self.emu.graph_url}/subscriptions/{sub_id}", headers=self.headers)

    def list(self) -> list[dict[str, Any]]:
        response = self.http.get(f"{self.emu.graph_url}/subscriptions", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()["value"]

    def renew(self, sub_id: str, minutes: float) -> httpx.Response:
        return self.http.patch(
            f"{self.emu.graph_url}/subscriptions/{sub_id}",
            json={"expirationDateTime": _iso(self.emu, minutes)},
            headers=self.headers,
        )

    def delete(self, sub_id: str) -> httpx.Response:
        return self.http.delete(
            f"{self.emu.graph_url}/subscriptions/{sub_id}", headers=self.headers
        )

    def reauthorize(self, sub_id: str) -> httpx.Response:
        return self.http.post(
            f"{self.emu.graph_url}/subscriptions/{sub_id}/reauthorize", headers=self.headers
        )


def chat_id(seed: Seed, n: int) -> str:
    chat = seed.chats[n].id
    assert chat is not None  # build_seed names every chat
    return chat


def _iso(emu: RunningEmulator, minutes: float) -> str:
    return (emu.clock.now() + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def agent_subscriber(emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]) -> Subscriber:
    return Subscriber(emu, http, agent)


@dataclass
class Admin:
    emu: RunningEmulator
    http: httpx.Client

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.http.post(self.emu.admin_url + path, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()

    def notifications(self) -> dict[str, Any]:
        return self.http.get(self.emu.admin_url + "/notifications").json()

    def stats(self) -> dict[str, int]:
        return self.notifications()["stats"]

    def wait_until(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float = 15.0
    ) -> None:
        """Poll the admin view of delivery until ``condition`` holds (bounded)."""
        deadline = time.monotonic() + timeout
        while not condition(self.notifications()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.notifications()}")
            time.sleep(0.02)

    def message(self, chat_id: str, from_user: str, content: str = "hello") -> dict[str, Any]:
        return self.post(f"/chats/{chat_id}/messages", {"from_user": from_user, "content": content})

    def mail(self, to: str, subject: str = "hi") -> dict[str, Any]:
        return self.post(
            "/mail", {"to": to, "from": "someone@fabrikam.example", "subject": subject}
        )


@pytest.fixture
def admin(emu: RunningEmulator, http: httpx.Client) -> Admin:
    return Admin(emu, http)


def entra_app_token(entra: Entra) -> str:
    """An app-only Graph token of the agent identity (roles from the seed)."""
    from tests.emulator.emulator_testkit import GRAPH_SCOPE, JWT_BEARER

    t1 = entra.t1().json()["access_token"]
    response = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.agent_identity.id,
        scope=GRAPH_SCOPE,
        client_assertion_type=JWT_BEARER,
        client_assertion=t1,
    )
    assert response.status_code == 200, response.text
    return response.json()["access_token"]
