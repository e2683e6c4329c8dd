"""The webhook Graph calls, over real HTTP: validation echo, clientState, hints stored before the 202,
mail nudges, lifecycle events, and a 503 (so Graph retries) when the store cannot take the hints."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from service.devstack.uvicorn_runner import RunningServer, serve_app
from service.ledger.fleet.hints import HintLog, HintReader
from service.notifications.lifecycle_log import read_events
from service.notifications.options import NotificationOptions
from service.notifications.payloads import ChangeNotification
from service.notifications.receiver import MAX_BODY_BYTES, NOTIFICATIONS_PATH, NotificationReceiver
from service.notifications.wiring import Notifications
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import ChangeMetrics

SECRET = "c1ient-state-secret"
CHAT = "19:abc123@thread.v2"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Harness:
    def __init__(self, backend: MemoryBackend, max_concurrent: int = 32) -> None:
        self.mail_nudges = 0
        self.lifecycle: list[ChangeNotification] = []
        self.reader = HintReader(backend, clock=lambda: NOW)
        self.receiver = NotificationReceiver(
            HintLog(backend, clock=lambda: NOW),
            SECRET,
            on_mail=self._mail,
            on_lifecycle=self._lifecycle,
            clock=lambda: NOW,
            metrics=ChangeMetrics(),
            max_concurrent=max_concurrent,
        )

    def _mail(self) -> None:
        self.mail_nudges += 1

    async def _lifecycle(self, item: ChangeNotification) -> None:
        self.lifecycle.append(item)


@pytest.fixture
async def store(tmp_path) -> FaultyBackend:
    return FaultyBackend(LocalBackend(tmp_path / "store"))


@pytest.fixture
async def served(store: FaultyBackend) -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    harness = Harness(store)
    async with (
        serve_app(Starlette(routes=harness.receiver.routes())) as server,
        httpx.AsyncClient(base_url=server.base_url, timeout=10) as client,
    ):
        yield harness, client


def chat_item(message_id: str, client_state: str | None = SECRET) -> dict[str, Any]:
    return {
        "subscriptionId": "s1",
        "changeType": "created",
        "clientState": client_state,
        "tenantId": "t",
        "resource": f"chats('{CHAT}')/messages('{message_id}')",
        "resourceData": {"id": message_id, "@odata.type": "#Microsoft.Graph.chatMessage"},
        "subscriptionExpirationDateTime": "2026-12-03T12:00:00Z",
    }


async def test_the_validation_token_is_echoed_as_plain_text(served) -> None:
    _, client = served
    token = "Validation: Testing client application reachability for subscription Request-Id: 9a2b"
    response = await client.post(NOTIFICATIONS_PATH, params={"validationToken": token})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == token


async def test_a_chat_message_notification_is_a_hint_stored_before_the_answer(served) -> None:
    harness, client = served
    response = await client.post(
        NOTIFICATIONS_PATH, json={"value": [chat_item("m1"), chat_item("m2")]}
    )
    assert response.status_code == 202
    hints = await harness.reader.poll()
    assert [(h.chat_id, h.message_id, h.source) for h in hints or []] == [
        (CHAT, "m1", "notification"),
        (CHAT, "m2", "notification"),
    ]


async def test_an_edit_or_a_reaction_makes_no_hint_but_an_unknown_change_type_does(
    served: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = served
    items = [
        {**chat_item("edited"), "changeType": "updated"},
        {**chat_item("gone"), "changeType": "deleted"},
        {**chat_item("odd"), "changeType": "somethingNew"},
        {**chat_item("bare"), "changeType": None},
        {**chat_item("both"), "changeType": "created,updated"},
    ]
    assert (await client.post(NOTIFICATIONS_PATH, json={"value": items})).status_code == 202
    assert [h.message_id for h in await harness.reader.poll() or []] == ["odd", "bare", "both"]


TEAM = "00000000-0000-0000-0000-0000000000aa"
CHANNEL = "19:general@thread.tacv2"


def channel_item(path: str, message_id: str, client_state: str | None = SECRET) -> dict[str, Any]:
    resource = f"teams('{TEAM}')/channels('{CHANNEL}')/{path}"
    return {
        **chat_item(message_id, client_state),
        "resource": resource,
        "resourceData": {"id": message_id, "@odata.id": resource},
    }


async def test_a_channel_message_or_reply_notification_is_a_hint_for_its_channel(
    served: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = served
    items = [
        channel_item("messages('root1')", "root1"),
        channel_item("messages('root1')/replies('reply1')", "reply1"),
        {**channel_item("messages('root2')", "root2"), "changeType": "updated"},  # an edit
        channel_item("messages('forged')", "forged", client_state="not-ours"),
    ]
    assert (await client.post(NOTIFICATIONS_PATH, json={"value": items})).status_code == 202
    hints = await harness.reader.poll() or []
    assert [(h.chat_id, h.message_id, h.source, h.kind) for h in hints] == [
        (f"{TEAM}/{CHANNEL}", "root1", "notification", "channel"),
        (f"{TEAM}/{CHANNEL}", "reply1", "notification", "channel"),
    ]
    assert [
        sample.value
        for metric in harness.receiver.metrics.graph_notifications.collect()
        for sample in metric.samples
        if sample.labels == {"kind": "channel", "outcome": "hinted"}
        and sample.name.endswith("_total")
    ] == [2.0]


async def test_an_item_without_our_client_state_is_dropped(served) -> None:
    harness, client = served
    response = await client.post(
        NOTIFICATIONS_PATH, json={"value": [chat_item("m1", "forged"), chat_item("m2", None)]}
    )
    assert response.status_code == 202
    assert await harness.reader.poll() == []


async def test_a_mail_notification_starts_an_email_cycle(served) -> None:
    harness, client = served
    item = {
        "subscriptionId": "s2",
        "changeType": "created",
        "clientState": SECRET,
        "resource": "Users/e47b0700/Messages/AAMkAD",
        "resourceData": {"id": "AAMkAD"},
    }
    assert (await client.post(NOTIFICATIONS_PATH, json={"value": [item]})).status_code == 202
    assert harness.mail_nudges == 1


async def test_lifecycle_events_reach_the_subscription_manager(served) -> None:
    harness, client = served
    item = {
        "subscriptionId": "s1",
        "lifecycleEvent": "reauthorizationRequired",
        "clientState": SECRET,
        "resource": "/users/e47b/chats/getAllMessages",
    }
    assert (await client.post(NOTIFICATIONS_PATH, json={"value": [item]})).status_code == 202
    assert [i.lifecycle_event for i in harness.lifecycle] == ["reauthorizationRequired"]


async def test_when_the_store_fails_graph_is_asked_to_retry_and_the_retry_lands(
    served, store
) -> None:
    harness, client = served
    store.add(FaultRule(Fault.WRITE_FAILS, key="hints/*", times=1))
    response = await client.post(NOTIFICATIONS_PATH, json={"value": [chat_item("m1")]})
    assert response.status_code == 503
    assert await harness.reader.poll() == []
    response = await client.post(NOTIFICATIONS_PATH, json={"value": [chat_item("m1")]})
    assert response.status_code == 202
    assert [h.message_id for h in await harness.reader.poll() or []] == ["m1"]


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"value": 5}', b"[]"])
async def test_a_body_that_is_not_a_notification_batch_is_refused(served, body: bytes) -> None:
    _, client = served
    response = await client.post(
        NOTIFICATIONS_PATH, content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


async def test_a_lifecycle_event_is_recorded_for_the_manager_before_the_answer_or_graph_retries(
    store,
) -> None:
    url = "https://agent.example.com/graph/notifications"
    options = NotificationOptions(url, url, SECRET, max_concurrent=32)
    notifications = Notifications(options, store, ChangeMetrics(), clock=lambda: NOW)
    item = {
        "subscriptionId": "s1",
        "lifecycleEvent": "subscriptionRemoved",
        "clientState": SECRET,
        "resource": "/users/e47b/chats/getAllMessages",
    }
    store.add(FaultRule(Fault.WRITE_FAILS, key="notifications/*", times=1))
    async with (
        serve_app(Starlette(routes=notifications.receiver.routes())) as server,
        httpx.AsyncClient(base_url=server.base_url, timeout=10) as client,
    ):
        assert (await client.post(NOTIFICATIONS_PATH, json={"value": [item]})).status_code == 503
        assert await read_events(store, 0) == ([], 0)
        assert (await client.post(NOTIFICATIONS_PATH, json={"value": [item]})).status_code == 202
    events, _ = await read_events(store, 0)
    assert [(e.subscription_id, e.event) for e in events] == [("s1", "subscriptionRemoved")]


# --- what an unauthenticated caller can make the webhook hold -------------------------------------

# A guard against a hung test, not a timing claim: a server that waits for the whole body never answers.
SOCKET_GUARD_S = 30.0


def _head(framing: str) -> str:
    return (
        f"POST {NOTIFICATIONS_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n\r\n"
    )


@contextlib.asynccontextmanager
async def _raw_request(
    server: RunningServer, head: str, body: bytes
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Send a request head and the first part of its body, and leave the connection open meanwhile."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        yield reader, writer
    finally:
        writer.close()


async def _status(reader: asyncio.StreamReader) -> int:
    line = await asyncio.wait_for(reader.readline(), SOCKET_GUARD_S)
    return int(line.split()[1])


@pytest.fixture
async def raw_served(store: FaultyBackend) -> AsyncIterator[tuple[Harness, RunningServer]]:
    harness = Harness(store, max_concurrent=1)
    async with serve_app(Starlette(routes=harness.receiver.routes())) as server:
        yield harness, server


async def test_a_declared_body_over_the_limit_is_refused_without_reading_it(
    raw_served: tuple[Harness, RunningServer],
) -> None:
    _, server = raw_served
    head = _head(f"Content-Length: {100 * 1024 * 1024}")
    async with _raw_request(server, head, b"x" * 65536) as (
        reader,
        _,
    ):  # nowhere near the declared 100 MB
        assert await _status(reader) == 413


async def test_a_chunked_body_is_cut_off_past_the_limit(
    raw_served: tuple[Harness, RunningServer],
) -> None:
    _, server = raw_served
    head = _head("Transfer-Encoding: chunked")
    chunk = b"x" * 100_000
    sent = 0
    async with _raw_request(server, head, b"") as (reader, writer):
        # Past the limit by one chunk, and the body never ends: only a cut-off answers.
        while sent <= MAX_BODY_BYTES:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)
        assert await _status(reader) == 413


async def test_requests_over_the_concurrency_bound_are_told_to_retry(
    raw_served: tuple[Harness, RunningServer],
) -> None:
    harness, server = raw_served
    async with httpx.AsyncClient(base_url=server.base_url, timeout=SOCKET_GUARD_S) as client:
        # The first request stays open mid-body, holding the only slot.
        async with _raw_request(server, _head("Transfer-Encoding: chunked"), b'2\r\n{"\r\n'):
            busy = await _post_until(client, lambda status: status == 503)
            assert busy.headers["retry-after"] == "1"
            assert (
                await harness.reader.poll() == []
            )  # refused, so Graph retries: nothing half-taken
        # The held request's connection is gone: its slot frees.
        assert (await _post_until(client, lambda status: status != 503)).status_code == 202


async def _post_until(client: httpx.AsyncClient, done: Callable[[int], bool]) -> httpx.Response:
    """Post a notification until the answer's status is ``done`` (bounded: the server takes a connection's
    request in, or lets it go, a moment after the socket call returns)."""
    for _ in range(100):
        response = await client.post(NOTIFICATIONS_PATH, json={"value": [chat_item("m1")]})
        if done(response.status_code):
            return response
        await asyncio.sleep(0.05)
    raise AssertionError(f"still {response.status_code} after 100 tries")


async def test_the_validation_echo_forbids_content_sniffing(
    served: tuple[Harness, httpx.AsyncClient],
) -> None:
    _, client = served
    response = await client.post(
        NOTIFICATIONS_PATH, params={"validationToken": "<html><script>x</script>"}
    )
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
