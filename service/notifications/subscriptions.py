"""The subscription manager: keeps the fleet's Graph change-notification subscriptions alive, on the one
replica that holds the ``subscription_manager`` lease.

Two subscriptions, both for the agent user: its chats' messages
(``/users/{id}/chats/getAllMessages``, created and updated) and its Inbox
(``/users/{id}/mailFolders('Inbox')/messages``, created). Their ids, resources and expiries live in
``notifications/subscriptions.json``, written with If-Match on the record read in the same cycle, so a
former holder that still believes in its lease cannot overwrite its successor's record.

Each cycle (every ``Lease.renew_every``): renew the lease; if this replica does not hold it, do
nothing. Otherwise read the record and the lifecycle events recorded since (``lifecycle_log``), decide
(``decide``, pure) and act, checking the lease again before every Graph call so a holder that lost it
stops at once. A subscription is created when missing, expired, or pointing elsewhere than the
settings say; renewed when half its lifetime has passed; recreated when Graph removed it
(subscriptionRemoved, or a 404 on renewal); reauthorized on reauthorizationRequired; and a ``missed``
on the Inbox nudges an email cycle, because Graph dropped mail notifications.

Read, not run (no tenant here), Microsoft Graph docs:
- "subscription resource type", maximum subscription lifetimes: Teams chatMessage 4,320 minutes
  (under 3 days); Outlook message 10,080 minutes (under 7 days).
- "Get change notifications for chats and messages in Teams": an expirationDateTime more than 1 hour
  ahead requires a lifecycleNotificationUrl.
- "Reduce missing subscriptions and change notifications" (lifecycle notifications):
  reauthorizationRequired is answered by POST /subscriptions/{id}/reauthorize or by a renewal;
  subscriptionRemoved means the subscription is gone and must be created again; missed (Outlook
  only) means notifications were dropped and the app should resynchronise by reading.
- "Update subscription": PATCH expirationDateTime renews.
A notification is only a hint (SPEC §9): every subscription failing still loses nothing, the polls
read Graph on their own cadence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphNotFound
from service.graph.subscription_model import GraphSubscription
from service.clock import Clock, format_timestamp, utc_now
from service.domain.source import Source
from service.ledger.fleet.leases import Lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.notifications.lifecycle_log import LifecycleEvent, read_events
from service.notifications.nudge import Nudge
from service.notifications.subscription_record import (
    RECORD_KEY,
    Kept,
    SubscriptionsRecord,
    parse_record,
    render_record,
)
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import ChangeMetrics

log = logging.getLogger(__name__)

ROLE = "subscription_manager"

# Graph measures the limits on its own clock: asking an hour short of them keeps a replica whose
# clock runs ahead from being refused.
CLOCK_ALLOWANCE = timedelta(minutes=60)
CHAT_MAX_LIFETIME = timedelta(minutes=4320)
MAIL_MAX_LIFETIME = timedelta(minutes=10080)


@dataclass(frozen=True, slots=True)
class Wanted:
    """A subscription the settings ask for."""

    kind: Source
    resource: str
    change_type: str
    lifetime: timedelta
    notification_url: str
    lifecycle_url: str

    @property
    def renew_before(self) -> timedelta:
        """Renew once half the lifetime has passed: a day or more of slack for a failing Graph."""
        return self.lifetime / 2


def wanted_subscriptions(
    agent_user_id: str, notification_url: str, lifecycle_url: str
) -> tuple[Wanted, ...]:
    user = agent_user_id.replace("'", "''")
    return (
        Wanted(
            Source.CHAT,
            f"/users/{user}/chats/getAllMessages",
            "created,updated",
            CHAT_MAX_LIFETIME - CLOCK_ALLOWANCE,
            notification_url,
            lifecycle_url,
        ),
        Wanted(
            Source.EMAIL,
            f"/users/{user}/mailFolders('Inbox')/messages",
            "created",
            MAIL_MAX_LIFETIME - CLOCK_ALLOWANCE,
            notification_url,
            lifecycle_url,
        ),
    )


class Action(str, Enum):
    CREATE = "create"  # none kept (first run, or a new kind)
    RECREATE = "recreate"  # kept but gone: removed, expired, or for another resource or URL
    RENEW = "renew"
    REAUTHORIZE = "reauthorize"


@dataclass(frozen=True, slots=True)
class Decision:
    wanted: Wanted
    action: Action
    reason: str
    current: Kept | None = None


def decide(
    wanted: Iterable[Wanted],
    kept: Mapping[Source, Kept],
    events: Iterable[LifecycleEvent],
    now: datetime,
) -> list[Decision]:
    """What to do for each wanted subscription (pure: the rules the tests pin). Events about a
    subscription the record does not keep are a former one's and change nothing."""
    by_id: dict[str, set[str]] = {}
    for event in events:
        by_id.setdefault(event.subscription_id, set()).add(event.event)
    decisions: list[Decision] = []
    for w in wanted:
        current = kept.get(w.kind)
        if current is None:
            decisions.append(Decision(w, Action.CREATE, "none kept"))
            continue
        seen = by_id.get(current.id, set())
        if current.resource != w.resource or current.notification_url != w.notification_url:
            decisions.append(Decision(w, Action.RECREATE, "settings changed", current))
        elif "subscriptionRemoved" in seen:
            decisions.append(Decision(w, Action.RECREATE, "subscriptionRemoved", current))
        elif now >= current.expires_at:
            decisions.append(
                Decision(w, Action.RECREATE, "expired", current)
            )  # Graph deletes it silently
        elif current.expires_at - now <= w.renew_before:
            decisions.append(
                Decision(w, Action.RENEW, "due", current)
            )  # a renewal also reauthorizes
        elif "reauthorizationRequired" in seen:
            decisions.append(Decision(w, Action.REAUTHORIZE, "reauthorizationRequired", current))
    return decisions


def mail_missed(kept: Mapping[Source, Kept], events: Iterable[LifecycleEvent]) -> bool:
    """Graph dropped Inbox notifications (``missed``): read the mail rather than wait for the poll."""
    mail = kept.get(Source.EMAIL)
    return any(
        e.event == "missed" and (mail is None or e.subscription_id == mail.id) for e in events
    )


@dataclass
class SubscriptionManager:
    graph: GraphClient
    backend: MemoryBackend
    lease: Lease
    wanted: tuple[Wanted, ...]
    client_state: str
    on_mail_missed: Callable[[], None] = lambda: None
    metrics: ChangeMetrics = field(kw_only=True)
    clock: Clock = utc_now
    # Set when this replica recorded a lifecycle event: a cycle runs now rather than at the interval.
    poked: Nudge = field(default_factory=Nudge)

    @property
    def interval_s(self) -> float:
        return self.lease.renew_every.total_seconds()

    async def cycle(self) -> None:
        await self.lease.acquire_or_renew()
        if not self.lease.held():
            self._publish({})
            return
        read = await read_parsed(self.backend, RECORD_KEY, parse_record)
        if read.outcome is ReadOutcome.UNRESOLVED:
            log.warning(
                "subscriptions record unresolved; managing nothing this cycle",
                extra={"why": read.why},
            )
            return
        record = read.value if read.value is not None else SubscriptionsRecord()
        try:
            events, offset = await read_events(self.backend, record.lifecycle_offset)
        except StorageError as exc:
            # Renewals go on; the events wait for the next cycle (the offset does not move).
            log.warning("lifecycle events unreadable", extra={"error": type(exc).__name__})
            events, offset = [], record.lifecycle_offset
        kept = dict(record.kept)
        created: list[str] = []
        done = True
        for decision in decide(self.wanted, kept, events, self.clock()):
            if not self.lease.held():
                done = False
                break
            result = await self._apply(decision)
            if result is None:
                done = False
                continue
            if decision.current is None or result.id != decision.current.id:
                created.append(result.id)
            kept[decision.wanted.kind] = result
        if mail_missed(record.kept, events):
            log.info("Graph missed mail notifications; nudging an email cycle")
            self.on_mail_missed()
        # The events count as handled only when every decision was carried out: a removal or a
        # reauthorization that failed is decided again next cycle (acting twice on one is harmless).
        updated = SubscriptionsRecord(kept, offset if done else record.lifecycle_offset)
        if updated != record or read.outcome is ReadOutcome.ABSENT:
            await self._store(updated, read.etag, created)
        self._publish(kept)

    async def _apply(self, decision: Decision) -> Kept | None:
        """Carry out one decision; the subscription now kept, or None to keep the record as it was."""
        w, current = decision.wanted, decision.current
        try:
            if decision.action is Action.RENEW and current is not None:
                try:
                    sub = await self.graph.subscriptions.renew_subscription(
                        current.id, self.clock() + w.lifetime
                    )
                    return self._counted(w, "renewed", self._kept(sub, w))
                except GraphNotFound:
                    return await self._create(w, "recreated", "gone at renewal")
            if decision.action is Action.REAUTHORIZE and current is not None:
                try:
                    await self.graph.subscriptions.reauthorize_subscription(current.id)
                    return self._counted(w, "reauthorized", current)
                except GraphNotFound:
                    return await self._create(w, "recreated", "gone at reauthorization")
            if (
                decision.action is Action.RECREATE
                and current is not None
                and decision.reason == "settings changed"
            ):
                await self._delete_quietly(current.id)
            return await self._create(
                w, "created" if decision.action is Action.CREATE else "recreated", decision.reason
            )
        except GraphError as exc:
            # Tried again next cycle; until then the polls carry the load (notifications are only hints).
            log.warning(
                "subscription %s failed",
                decision.action.value,
                extra={
                    "resource": w.kind.subscription_name,
                    "error": type(exc).__name__,
                    "status": exc.status,
                },
            )
            self._count(w.kind, "failed")
            return None

    async def _create(self, w: Wanted, action: str, reason: str) -> Kept:
        sub = await self.graph.subscriptions.create_subscription(
            {
                "changeType": w.change_type,
                "notificationUrl": w.notification_url,
                "lifecycleNotificationUrl": w.lifecycle_url,
                "resource": w.resource,
                "expirationDateTime": format_timestamp(self.clock() + w.lifetime),
                "clientState": self.client_state,
            }
        )
        log.info(
            "subscription %s",
            action,
            extra={
                "resource": w.kind.subscription_name,
                "subscription_id": sub.id,
                "reason": reason,
            },
        )
        return self._counted(w, action, self._kept(sub, w))

    def _kept(self, sub: GraphSubscription, w: Wanted) -> Kept:
        return Kept(sub.id, w.resource, sub.expires_at, w.notification_url)

    def _counted(self, w: Wanted, action: str, kept: Kept) -> Kept:
        self._count(w.kind, action)
        return kept

    async def _store(
        self, record: SubscriptionsRecord, etag: str | None, created: list[str]
    ) -> None:
        if not self.lease.held():
            await self._abandon(created, "lease lost before the record was written")
            return
        try:
            if etag is None:
                await self.backend.write_text(RECORD_KEY, render_record(record), if_absent=True)
            else:
                await self.backend.write_text(RECORD_KEY, render_record(record), if_match=etag)
        except ConcurrencyError:
            # Another holder wrote in between: its record stands, ours are orphans.
            await self._abandon(created, "another manager wrote the record")
        except StorageError as exc:
            # The write may have landed: the subscriptions are kept (they expire on their own if not).
            log.warning(
                "subscriptions record write outcome unknown", extra={"error": type(exc).__name__}
            )

    async def _abandon(self, created: list[str], why: str) -> None:
        log.warning(
            "deleting subscriptions created this cycle: %s", why, extra={"count": len(created)}
        )
        for sub_id in created:
            await self._delete_quietly(sub_id)

    async def _delete_quietly(self, sub_id: str) -> None:
        try:
            await self.graph.subscriptions.delete_subscription(sub_id)
        except GraphError as exc:
            # Left to expire (at most the lifetime asked for); it only sends hints nobody needs.
            log.info(
                "subscription not deleted",
                extra={"subscription_id": sub_id, "error": type(exc).__name__},
            )

    def _publish(self, kept: Mapping[Source, Kept]) -> None:
        now = self.clock()
        for kind in Source:
            current = kept.get(kind)
            self.metrics.notification_subscriptions.labels(resource=kind.subscription_name).set(
                1 if current is not None and current.expires_at > now else 0
            )

    def _count(self, kind: Source, action: str) -> None:
        self.metrics.notification_subscription_changes.labels(
            resource=kind.subscription_name, action=action
        ).inc()
