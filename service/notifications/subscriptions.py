"""The subscription manager: keeps the fleet's Graph change-notification subscriptions alive, on the one
replica that holds the ``subscription_manager`` lease.

The agent user's chat and Inbox subscriptions, and one per watched team channel (which ones, and the
rules: service.notifications.subscription_plan). Their ids, resources and expiries live in
``notifications/subscriptions.json``, written with If-Match on the record read in the same cycle, so a
former holder that still believes in its lease cannot overwrite its successor's record.

Each cycle (every ``Lease.renew_every``): renew the lease; if this replica does not hold it, do
nothing. Otherwise read the record, the lifecycle events recorded since (``lifecycle_log``) and the
watched channels list (one blob read), decide (``decide``, pure) and act, checking the lease again
before every Graph call so a holder that lost it stops at once. A subscription is created when
missing, expired, or pointing elsewhere than the settings say; renewed when half its lifetime has
passed; recreated when Graph removed it (subscriptionRemoved, or a 404 on renewal); reauthorized on
reauthorizationRequired; deleted when its channel left the list; and a ``missed`` on the Inbox
nudges an email cycle, because Graph dropped mail notifications.

A notification is only a hint (SPEC §9): every subscription failing still loses nothing, the polls
(and for channels the channel watch's rotation) read Graph on their own cadence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from service.clock import Clock, format_timestamp, utc_now
from service.domain.conversation import TEAM_CHANNELS
from service.domain.source import Source
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphNotFound
from service.graph.subscription_model import GraphSubscription
from service.ledger.fleet.leases import Lease
from service.ledger.memory.watched_chats import parse_watched_chats
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.notifications.lifecycle_log import read_events
from service.notifications.nudge import Nudge
from service.notifications.subscription_plan import (
    Action,
    ChannelPlan,
    Decision,
    Wanted,
    decide,
    mail_missed,
    unwanted,
)
from service.notifications.subscription_record import (
    RECORD_KEY,
    Kept,
    SubscriptionKey,
    SubscriptionsRecord,
    parse_record,
    render_record,
)
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import ChangeMetrics

log = logging.getLogger(__name__)

ROLE = "subscription_manager"


@dataclass
class SubscriptionManager:
    graph: GraphClient
    backend: MemoryBackend
    lease: Lease
    wanted: tuple[Wanted, ...]  # the agent user's: chat and mail
    client_state: str
    on_mail_missed: Callable[[], None] = lambda: None
    metrics: ChangeMetrics = field(kw_only=True)
    clock: Clock = utc_now
    # Set when this replica recorded a lifecycle event: a cycle runs now rather than at the interval.
    poked: Nudge = field(default_factory=Nudge)
    # One subscription per watched channel; None: none (and any kept are deleted).
    channels: ChannelPlan | None = field(default=None, kw_only=True)

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
        wanted = self.wanted + await self._wanted_channels(record.kept)
        paced = self.channels.creates_per_cycle if self.channels is not None else 0
        created: list[str] = []
        done = await self._delete_unwanted(unwanted(wanted, kept, at_most=paced), kept)
        for decision in decide(wanted, kept, events, self.clock(), channel_creates=paced):
            if not self.lease.held():
                done = False
                break
            result = await self._apply(decision)
            if result is None:
                done = False
                continue
            if decision.current is None or result.id != decision.current.id:
                created.append(result.id)
            kept[decision.wanted.key] = result
        if mail_missed(record.kept, events):
            log.info("Graph missed mail notifications; nudging an email cycle")
            self.on_mail_missed()
        # The events count as handled only when every decision was carried out: a removal or a
        # reauthorization that failed is decided again next cycle (acting twice on one is harmless).
        updated = SubscriptionsRecord(kept, offset if done else record.lifecycle_offset)
        if updated != record or read.outcome is ReadOutcome.ABSENT:
            await self._store(updated, read.etag, created)
        self._publish(kept)

    async def _wanted_channels(self, kept: Iterable[SubscriptionKey]) -> tuple[Wanted, ...]:
        """One read of the watched channels list; unreadable, the channels kept stay as they are."""
        if self.channels is None:
            return ()
        read = await read_parsed(self.backend, TEAM_CHANNELS.watched_key, parse_watched_chats)
        if read.outcome is ReadOutcome.UNRESOLVED:
            log.warning(
                "watched channels unreadable; keeping the channel subscriptions as they are",
                extra={"why": read.why},
            )
            return self.channels.wanted(None, kept)
        return self.channels.wanted(read.value or frozenset(), kept)

    async def _delete_unwanted(
        self, keys: Iterable[SubscriptionKey], kept: dict[SubscriptionKey, Kept]
    ) -> bool:
        """Delete the subscriptions of channels no longer watched; one Graph would not delete stays
        in the record for the next cycle (it only sends hints nobody needs until then)."""
        for key in keys:
            if not self.lease.held():
                return False
            try:
                await self.graph.subscriptions.delete_subscription(kept[key].id)
            except GraphNotFound:
                pass  # gone already
            except GraphError as exc:
                log.info(
                    "unwanted subscription not deleted",
                    extra={"resource": key.text, "error": type(exc).__name__},
                )
                self._count(key.source, "failed")
                continue
            del kept[key]
            self._count(key.source, "deleted")
            log.info("subscription deleted", extra={"resource": key.text})
        return True

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
                    "resource": w.key.text,
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
                "resource": w.key.text,
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

    def _publish(self, kept: Mapping[SubscriptionKey, Kept]) -> None:
        """Live subscriptions per source: 1 each for chat and mail, one per subscribed channel."""
        now = self.clock()
        live = {kind: 0 for kind in Source}
        for key, current in kept.items():
            if current.expires_at > now:
                live[key.source] += 1
        for kind, count in live.items():
            self.metrics.notification_subscriptions.labels(resource=kind.subscription_name).set(
                count
            )

    def _count(self, kind: Source, action: str) -> None:
        self.metrics.notification_subscription_changes.labels(
            resource=kind.subscription_name, action=action
        ).inc()
