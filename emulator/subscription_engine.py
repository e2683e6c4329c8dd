"""The tenant's subscriptions and what happens to them over time: changes in the state become
notifications, expired subscriptions go, tokens near expiry raise reauthorizationRequired, and the
admin can force any lifecycle event.

Threads: the state calls ``observe`` from whichever thread changed it; the change is handed to the
emulator's event loop, where everything else runs. The subscription table is guarded by a lock so
the admin API and tests can read it from anywhere.

Read, not run ("Reduce missing subscriptions and change notifications", Graph docs):
reauthorizationRequired goes to every resource's lifecycleNotificationUrl before the access token
expires; "eventually change notification delivery pauses" until the app reauthorizes (POST
/subscriptions/{id}/reauthorize, or a renewal), and changes in between are lost. subscriptionRemoved
exists for Outlook messages and Teams chatMessage; missed only for Outlook resources. A subscription
without a lifecycleNotificationUrl receives no lifecycle notification. An expired subscription is
deleted without notice.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from emulator import channel_subscriptions
from emulator.changes import ChannelMessageChange, ChatMessageChange, MailChange, ResourceChange
from emulator.clock import Clock
from emulator.errors import bad_request
from emulator.notification_faults import DeliveryStats, NotificationFaults
from emulator.notifier import Notifier, Outgoing
from emulator.subscription_policy import SubscriptionPolicy
from emulator.subscriptions import Subscription, Watched
from emulator.timestamps import teams_time

LifecycleEvent = Literal["reauthorizationRequired", "subscriptionRemoved", "missed"]
_TICK_S = 0.1  # how often expiry and token deadlines are checked against the tenant clock


class SubscriptionEngine:
    def __init__(
        self, policy: SubscriptionPolicy, clock: Clock, tenant_id: str, random_seed: int | None
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.tenant_id = tenant_id
        self.stats = DeliveryStats()
        self.faults = NotificationFaults(random_seed)
        self.notifier = Notifier(policy, self.faults, self.stats)
        self._subs: dict[str, Subscription] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task[None] | None = None

    def bind(self) -> None:
        """Attach to the running loop (the server's); called by every subscription route."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._ticker = self._loop.create_task(self._tick_forever())

    # --- the table ---

    def active(self) -> list[Subscription]:
        self._expire(self.clock.now())
        with self._lock:
            return list(self._subs.values())

    def get(self, sub_id: str) -> Subscription | None:
        self._expire(self.clock.now())
        with self._lock:
            return self._subs.get(sub_id)

    def put(self, sub: Subscription) -> None:
        with self._lock:
            self._subs[sub.id] = sub

    def remove(self, sub_id: str) -> Subscription | None:
        with self._lock:
            return self._subs.pop(sub_id, None)

    def _expire(self, now: datetime) -> None:
        with self._lock:
            gone = [s.id for s in self._subs.values() if s.expiration <= now]
            for sub_id in gone:
                del self._subs[sub_id]
        if gone:
            self.stats.add("subscriptions_expired", len(gone))

    # --- changes to notifications ---

    def observe(self, change: ResourceChange) -> None:
        loop = self._loop
        if loop is None:  # nobody subscribed yet: nothing to notify
            return
        try:
            loop.call_soon_threadsafe(self._on_change, change)
        except RuntimeError:  # the emulator has stopped; its loop is closed and nobody listens
            pass

    def _on_change(self, change: ResourceChange) -> None:
        now = self.clock.now()
        for sub in self.active():
            if change.change_type not in sub.change_types or not _covers(sub, change):
                continue
            if sub.lifecycle_url is not None and now >= sub.token_expiry:
                self.stats.add("suppressed_awaiting_reauthorization")
                continue
            on_lost = None
            if sub.ref.kind is Watched.INBOX:
                on_lost = self._missed_callback(sub.id)
            self.notifier.submit(
                Outgoing(sub.notification_url, self._item(sub, change), on_lost=on_lost)
            )

    def _missed_callback(self, sub_id: str) -> Callable[[], None]:
        def missed() -> None:
            sub = self.get(sub_id)
            if sub is not None:
                self._send_lifecycle(sub, "missed")

        return missed

    def _item(self, sub: Subscription, change: ResourceChange) -> dict[str, Any]:
        if isinstance(change, ChannelMessageChange):
            resource, data = channel_subscriptions.notification_resource(change)
        elif isinstance(change, ChatMessageChange):
            resource = f"chats('{change.chat_id}')/messages('{change.message_id}')"
            data = {
                "id": change.message_id,
                "@odata.type": "#Microsoft.Graph.chatMessage",
                "@odata.id": resource,
            }
        else:
            resource = f"Users/{change.owner_id}/Messages/{change.message_id}"
            data = {
                "@odata.type": "#Microsoft.Graph.Message",
                "@odata.id": resource,
                "@odata.etag": f'W/"{change.change_key}"',
                "id": change.message_id,
            }
        return {
            **self._envelope(sub),
            "changeType": change.change_type,
            "resource": resource,
            "resourceData": data,
        }

    def _envelope(self, sub: Subscription) -> dict[str, Any]:
        return {
            "subscriptionId": sub.id,
            "subscriptionExpirationDateTime": teams_time(sub.expiration),
            "tenantId": self.tenant_id,
            "clientState": sub.client_state,
        }

    # --- lifecycle ---

    def force(self, sub_id: str, event: LifecycleEvent) -> bool:
        """Raise a lifecycle event now; returns whether a notification was sent (only with a
        lifecycleNotificationUrl)."""
        sub = self.get(sub_id)
        if sub is None:
            raise bad_request(f"subscription {sub_id!r} does not exist (or has expired)")
        if event == "missed" and sub.ref.kind.is_chat:
            raise bad_request(
                "Graph sends no 'missed' lifecycle notification for Teams chatMessage subscriptions"
            )
        if event == "subscriptionRemoved":
            self.remove(sub_id)
        elif event == "reauthorizationRequired":
            # Forced: delivery pauses at once until the app reauthorizes.
            sub = sub.challenged(self.clock.now())
            self.put(sub)
        return self._send_lifecycle(sub, event)

    def _send_lifecycle(self, sub: Subscription, event: LifecycleEvent) -> bool:
        if sub.lifecycle_url is None:
            return False
        self.stats.add(f"lifecycle_{event}")
        self.notifier.submit(
            Outgoing(
                sub.lifecycle_url, {**self._envelope(sub), "lifecycleEvent": event}, lifecycle=True
            )
        )
        return True

    async def _tick_forever(self) -> None:
        try:
            while True:
                self._tick()
                await asyncio.sleep(_TICK_S)
        finally:
            await self.notifier.aclose()

    def _tick(self) -> None:
        now = self.clock.now()
        for sub in self.active():
            if sub.lifecycle_url is None or sub.reauthorization_sent:
                continue
            if (sub.token_expiry - now).total_seconds() <= self.policy.reauthorize_lead_s:
                self.put(sub.challenged(sub.token_expiry))
                self._send_lifecycle(sub, "reauthorizationRequired")


def _covers(sub: Subscription, change: ResourceChange) -> bool:
    kind, target = sub.ref.kind, sub.ref.target
    if isinstance(change, ChannelMessageChange):
        return channel_subscriptions.covers(kind.value, target, change)
    if isinstance(change, ChatMessageChange):
        return (kind is Watched.CHAT and target == change.chat_id) or (
            kind is Watched.USER_CHATS and target in change.member_ids
        )
    assert isinstance(change, MailChange)
    return kind is Watched.INBOX and target == change.owner_id and change.folder == "inbox"
