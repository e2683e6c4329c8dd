"""Change notifications, wired for one replica when ``ENTRABOT_NOTIFICATION_URL`` is set.

Every replica serves the receiver (Graph reaches whichever one the load balancer picks), reads the
hints every chat-poll cycle and may become the subscription manager. Built in two steps because the
receiver's route must exist when the app is created, while the manager needs the agent user, known
only once the replica has started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from service.domain.source import Source
from service.config import Settings
from service.graph.client import GraphClient
from service.clock import Clock, utc_now
from service.ledger.fleet.hints import HintLog
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.ledger.fleet.leases import Lease
from service.notifications.lifecycle_log import event_of, record_event
from service.notifications.nudge import Nudge
from service.notifications.payloads import ChangeNotification
from service.notifications.receiver import NotificationReceiver
from service.notifications.subscriptions import (
    RECORD_KEY,
    ROLE,
    SubscriptionManager,
    parse_record,
    wanted_subscriptions,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics
from service.workers.email_poll import SETTLE_MARGIN

MAIL_SETTLE_SLACK = timedelta(seconds=1)
LIVE_CHECK_S = 30.0
LIVE_MARGIN = timedelta(minutes=1)  # a subscription about to expire may lapse before it is renewed


@dataclass
class Notifications:
    settings: Settings
    backend: MemoryBackend
    metrics: Metrics
    clock: Clock = utc_now
    mail_nudge: Nudge = field(default_factory=Nudge)  # wakes the email poll
    lifecycle_nudge: Nudge = field(default_factory=Nudge)  # wakes the subscription manager
    receiver: NotificationReceiver = field(init=False)
    _live: bool = False
    _live_checked_at: float = float("-inf")

    def __post_init__(self) -> None:
        state = self.settings.notification_client_state
        assert state is not None  # Settings refuses a notification URL without it
        self.receiver = NotificationReceiver(
            HintLog(self.backend, clock=self.clock),
            state.get_secret_value(),
            on_mail=self._on_mail,
            on_lifecycle=self._on_lifecycle,
            clock=self.clock,
            metrics=self.metrics,
            max_concurrent=self.settings.notification_max_concurrent,
        )

    async def chat_subscription_live(self) -> bool:
        """Whether the fleet's chat subscription is live (the manager's record, read at most every
        ``LIVE_CHECK_S``): the scanner relaxes only then. An unreadable record counts as not live, so
        the scan tightens rather than trusting notifications that may not come."""
        now = time.monotonic()
        if now - self._live_checked_at >= LIVE_CHECK_S:
            self._live_checked_at = now
            read = await read_parsed(self.backend, RECORD_KEY, parse_record)
            kept = (
                read.value.kept.get(Source.CHAT)
                if read.outcome is ReadOutcome.PRESENT and read.value
                else None
            )
            self._live = kept is not None and kept.expires_at > self.clock() + LIVE_MARGIN
        return self._live

    def _on_mail(self) -> None:
        """Wake the email poll now, and again once the new mail is past the poll's settle margin: a
        cycle leaves mail of the last seconds for the next one, which must not be an interval away."""
        self.mail_nudge.set_now_and_after((SETTLE_MARGIN + MAIL_SETTLE_SLACK).total_seconds())

    async def _on_lifecycle(self, item: ChangeNotification) -> None:
        """Recorded for whichever replica manages the subscriptions (raises StorageError: the receiver
        then answers 503 and Graph sends it again); this replica's manager looks at once, in case it
        is the one."""
        event = event_of(item, self.clock())
        if event is None:
            return
        await record_event(self.backend, event)
        self.lifecycle_nudge.set()

    def manager(
        self, graph: GraphClient, agent_user_id: str, replica_id: str
    ) -> SubscriptionManager:
        url = self.settings.notification_url
        lifecycle = self.settings.lifecycle_url
        state = self.settings.notification_client_state
        assert url is not None and lifecycle is not None and state is not None
        lease = Lease(self.backend, ROLE, replica_id, clock=self.clock, metrics=self.metrics.roles)
        return SubscriptionManager(
            graph,
            self.backend,
            lease,
            wanted_subscriptions(agent_user_id, url, lifecycle),
            state.get_secret_value(),
            on_mail_missed=self.mail_nudge.set,
            poked=self.lifecycle_nudge,
            metrics=self.metrics,
            clock=self.clock,
        )


def notifications_from_settings(
    settings: Settings, backend: MemoryBackend, metrics: Metrics, clock: Clock = utc_now
) -> Notifications | None:
    if not settings.notification_url:
        return None
    return Notifications(settings, backend, metrics, clock)
