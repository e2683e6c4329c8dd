"""Delivering change notifications as Graph does: the validation handshake, batches of
``{"value": [...]}`` per URL after a latency, retries with backoff for a bounded window, and the
admin's faults (drop, duplicate, delay, reorder) and pause.

Everything here runs on the emulator's event loop. Waits are real time (``asyncio.sleep``), not the
tenant clock: they model the network, as the throttle's windows do.

Read, not run ("Receive change notifications through webhooks"): the validation request is a POST
with ``?validationToken=`` and Content-Type text/plain; the answer must come within 10 s as 200 OK,
text/plain, the URL-decoded token. Notifications are published with a 3-second timeout; anything
but a 2xx in time is retried "multiple times, for up to 4 hours", then discarded. Several
notifications, even of different subscriptions, may share one POST.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

from emulator.errors import bad_request
from emulator.notification_faults import DeliveryStats, NotificationFaults
from emulator.subscription_policy import SubscriptionPolicy

# A notification held back to be reordered goes out after the next batch to its URL, or after this
# long if none comes, so a reorder never turns into a loss.
REORDER_RELEASE_S = 2.0


@dataclass(frozen=True)
class Outgoing:
    url: str
    item: dict[str, Any]  # one changeNotification
    lifecycle: bool = False
    on_lost: Callable[[], None] | None = field(
        default=None, compare=False
    )  # dropped, or failed for good


class Notifier:
    def __init__(
        self, policy: SubscriptionPolicy, faults: NotificationFaults, stats: DeliveryStats
    ) -> None:
        self._policy = policy
        self._faults = faults
        self._stats = stats
        self.latency_ms = policy.latency_ms
        self._pending: dict[str, list[Outgoing]] = {}
        self._held: dict[str, list[Outgoing]] = {}
        self._running = asyncio.Event()
        self._running.set()
        self.waiting = 0  # batches held by a pause
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None

    # --- the handshake ---

    async def validate(self, url: str) -> None:
        """POST ?validationToken= to ``url``; raise Graph's 400 unless it is echoed in time."""
        # Graph's tokens read like this one: spaces and colons, so a client that echoes the
        # still-encoded query value fails, as it would against Graph.
        token = f"Validation: Testing client application reachability for subscription Request-Id: {uuid.uuid4()}"
        target = url + ("&" if "?" in url else "?") + urlencode({"validationToken": token})
        try:
            async with asyncio.timeout(self._policy.validation_timeout_s):
                response = await self._http().post(
                    target, headers={"Content-Type": "text/plain; charset=utf-8"}
                )
                text = response.text
        except TimeoutError:
            self._stats.add("validations_timed_out")
            raise bad_request(
                "Subscription validation request timeout.", "ValidationError"
            ) from None
        except httpx.HTTPError:
            self._stats.add("validations_failed")
            raise bad_request(
                "Subscription validation request failed. Notification endpoint must respond with "
                "200 OK to validation request.",
                "ValidationError",
            ) from None
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if response.status_code != 200:
            self._stats.add("validations_failed")
            raise bad_request(
                "Subscription validation request failed. Notification endpoint must respond with "
                "200 OK to validation request.",
                "ValidationError",
            )
        if content_type != "text/plain" or text != token:
            self._stats.add("validations_failed")
            raise bad_request(
                "Subscription validation request failed. Response must exactly match "
                "validationToken query parameter.",
                "ValidationError",
            )
        self._stats.add("validations_passed")

    # --- notifications ---

    def submit(self, out: Outgoing) -> None:
        fault = self._faults.pick(lifecycle=out.lifecycle)
        if fault is None:
            self._enqueue(out)
        elif fault.action == "drop":
            self._stats.add("dropped")
            if out.on_lost is not None:
                out.on_lost()
        elif fault.action == "duplicate":
            self._stats.add("duplicated")
            self._enqueue(out)
            self._spawn(self._after(self.latency_ms / 1000, lambda: self._send(out.url, [out])))
        elif fault.action == "delay":
            self._stats.add("delayed")
            self._spawn(self._after(fault.delay_ms / 1000, lambda: self._enqueue_now(out)))
        else:
            self._stats.add("reordered")
            self._held.setdefault(out.url, []).append(out)
            asyncio.get_running_loop().call_later(REORDER_RELEASE_S, self._release_held, out.url)

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # trust_env=False: a proxy from the environment must never see loopback webhooks.
            self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False)
        return self._client

    def _enqueue(self, out: Outgoing) -> None:
        batch = self._pending.setdefault(out.url, [])
        batch.append(out)
        if len(batch) == 1:  # the first of a batch opens it; the latency closes it
            asyncio.get_running_loop().call_later(self.latency_ms / 1000, self._flush, out.url)

    async def _enqueue_now(self, out: Outgoing) -> None:
        self._enqueue(out)

    def _flush(self, url: str) -> None:
        batch = self._pending.pop(url, [])
        if batch:
            self._spawn(self._send(url, batch, then_release_held=True))

    def _release_held(self, url: str) -> None:
        held = self._held.pop(url, [])
        if held:
            self._spawn(self._send(url, held))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _after(seconds: float, then: Callable[[], Any]) -> None:
        await asyncio.sleep(seconds)
        await then()

    async def _send(
        self, url: str, batch: list[Outgoing], *, then_release_held: bool = False
    ) -> None:
        body = {"value": [o.item for o in batch]}
        started: float | None = None
        backoff = self._policy.retry_initial_s
        waits: list[float] = []
        while True:
            if not self._running.is_set():
                self.waiting += 1
                await self._running.wait()
                self.waiting -= 1
            started = started if started is not None else time.monotonic()
            delivered = await self._post(url, body)
            if then_release_held:
                then_release_held = False
                self._release_held(url)  # the held-back ones now arrive after this batch
            if delivered:
                self._stats.add("sent", len(batch))
                self._stats.add("posts")
                if waits:
                    self._stats.add_retry_waits(waits)
                return
            if time.monotonic() - started + backoff > self._policy.retry_window_s:
                self._stats.add("failed", len(batch))
                self._stats.add_retry_waits(waits)
                for o in batch:
                    if o.on_lost is not None:
                        o.on_lost()
                return
            self._stats.add("retried", len(batch))
            waits.append(backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._policy.retry_max_backoff_s)

    async def _post(self, url: str, body: dict[str, Any]) -> bool:
        """One attempt: a 2xx within the notification timeout."""
        try:
            async with asyncio.timeout(self._policy.notification_timeout_s):
                response = await self._http().post(url, json=body)
        except (TimeoutError, httpx.HTTPError):
            return False
        return 200 <= response.status_code < 300
