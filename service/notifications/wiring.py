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

from service.graph.client import GraphClient
from service.clock import Clock, utc_now
from service.ledger.fleet.hints import HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.notifications.lifecycle_log import event_of, record_event
from service.notifications.nudge import Nudge
from service.notifications.options import NotificationOptions
from service.notifications.payloads import ChangeNotification
from service.notifications.receiver import NotificationReceiver
from service.notifications.subscription_plan import ChannelPlan, wanted_subscriptions
from service.notifications.subscription_record import CHAT_KEY, RECORD_KEY, parse_record
from service.notifications.subscriptions import SubscriptionManager
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import ChangeMetrics
from service.workers.email_poll import SETTLE_MARGIN

MAIL_SETTLE_SLACK = timedelta(seconds=1)
LIVE_CHECK_S = 30.0
LIVE_MARGIN = timedelta(minutes=1)  # a subscription about to expire may lapse before it is renewed


@dataclass
class Notifications:
    options: NotificationOptions
    backend: MemoryBackend
    metrics: ChangeMetrics
    clock: Clock = utc_now
    mail_nudge: Nudge = field(default_factory=Nudge)  # wakes the email poll
    lifecycle_nudge: Nudge = field(default_factory=Nudge)  # wakes the subscription manager
    receiver: NotificationReceiver = field(init=False)
    _live: bool = False
    _live_checked_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.receiver = NotificationReceiver(
            HintLog(self.backend, clock=self.clock),
            self.options.client_state,
            on_mail=self._on_mail,
            on_lifecycle=self._on_lifecycle,
            clock=self.clock,
            metrics=self.metrics,
            max_concurrent=self.options.max_concurrent,
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
                read.value.kept.get(CHAT_KEY)
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

    def manager(self, graph: GraphClient, agent_user_id: str, lease: Lease) -> SubscriptionManager:
        """``lease``: the subscription manager's role (``subscriptions.ROLE``), of this replica."""
        return SubscriptionManager(
            graph,
            self.backend,
            lease,
            wanted_subscriptions(agent_user_id, self.options.url, self.options.lifecycle_url),
            self.options.client_state,
            on_mail_missed=self.mail_nudge.set,
            poked=self.lifecycle_nudge,
            metrics=self.metrics,
            clock=self.clock,
            channels=ChannelPlan(
                self.options.url,
                self.options.lifecycle_url,
                self.options.channel_subscriptions_max,
            ),
        )
