"""Which Graph change-notification subscriptions the fleet wants, and what to do about each (pure: the
rules the tests pin). The subscription manager (service.notifications.subscriptions) reads the record
and the lifecycle events, asks ``decide`` and carries the decisions out.

Wanted: the agent user's chats' messages (``/users/{id}/chats/getAllMessages``, created and updated),
its Inbox (``/users/{id}/mailFolders('Inbox')/messages``, created), and one subscription per watched
team channel (``/teams/{team id}/channels/{channel id}/messages``, created and updated: a reply is a
new message of the channel), at most ``ChannelPlan.limit`` of them.

Read, not run (no tenant here), Microsoft Graph docs:
- "subscription resource type", maximum subscription lifetimes: Teams chatMessage 4,320 minutes
  (under 3 days), channel messages included; Outlook message 10,080 minutes (under 7 days).
- "Get change notifications for chats and messages in Teams" / "... for messages in Teams channels
  and chats": an expirationDateTime more than 1 hour ahead requires a lifecycleNotificationUrl.
  "To track messages and replies in a channel ... subscribe to /teams/{id}/channels/{id}/messages";
  delegated ChannelMessage.Read.All (application ChannelMessage.Read.All, or ChannelMessage.Read.Group
  by resource-specific consent). The cross-channel resources (``/teams/getAllMessages``) are
  application-only ("Delegated: Not supported"), so the fleet, signed in as the agent user,
  subscribes channel by channel.
- "Reduce missing subscriptions and change notifications" (lifecycle notifications):
  reauthorizationRequired is answered by POST /subscriptions/{id}/reauthorize or by a renewal;
  subscriptionRemoved means the subscription is gone and must be created again; missed (Outlook
  only) means notifications were dropped and the app should resynchronise by reading.
- "Update subscription": PATCH expirationDateTime renews.
Graph throttles subscription creation like any other request (and validates the notification URL
on each one), so channel subscriptions are created or deleted at most ``creates_per_cycle`` a cycle:
200 watched channels are all subscribed within ten cycles, not in one burst.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from service.domain.channel_place import split_channel_conversation
from service.domain.source import Source
from service.notifications.lifecycle_log import LifecycleEvent
from service.notifications.subscription_record import (
    CHAT_KEY,
    MAIL_KEY,
    Kept,
    SubscriptionKey,
    channel_key,
)

# Graph measures the limits on its own clock: asking an hour short of them keeps a replica whose
# clock runs ahead from being refused.
CLOCK_ALLOWANCE = timedelta(minutes=60)
CHAT_MAX_LIFETIME = timedelta(minutes=4320)  # channel messages are chatMessages too
MAIL_MAX_LIFETIME = timedelta(minutes=10080)
CHANNEL_CREATES_PER_CYCLE = 20


@dataclass(frozen=True, slots=True)
class Wanted:
    """A subscription the settings ask for."""

    key: SubscriptionKey
    resource: str
    change_type: str
    lifetime: timedelta
    notification_url: str
    lifecycle_url: str

    @property
    def kind(self) -> Source:
        return self.key.source

    @property
    def renew_before(self) -> timedelta:
        """Renew once half the lifetime has passed: a day or more of slack for a failing Graph."""
        return self.lifetime / 2


def wanted_subscriptions(
    agent_user_id: str, notification_url: str, lifecycle_url: str
) -> tuple[Wanted, ...]:
    """The agent user's two: its chats' messages and its Inbox."""
    user = agent_user_id.replace("'", "''")
    chat_lifetime = CHAT_MAX_LIFETIME - CLOCK_ALLOWANCE
    mail_lifetime = MAIL_MAX_LIFETIME - CLOCK_ALLOWANCE
    return (
        Wanted(
            CHAT_KEY,
            f"/users/{user}/chats/getAllMessages",
            "created,updated",
            chat_lifetime,
            notification_url,
            lifecycle_url,
        ),
        Wanted(
            MAIL_KEY,
            f"/users/{user}/mailFolders('Inbox')/messages",
            "created",
            mail_lifetime,
            notification_url,
            lifecycle_url,
        ),
    )


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    """One subscription per watched channel, at most ``limit`` (ENTRABOT_CHANNEL_SUBSCRIPTIONS_MAX)."""

    notification_url: str
    lifecycle_url: str
    limit: int
    creates_per_cycle: int = CHANNEL_CREATES_PER_CYCLE

    def subscription(self, conversation_id: str) -> Wanted:
        """ValueError for an id that is not ``<team id>/<channel id>``."""
        team_id, channel_id = split_channel_conversation(conversation_id)
        return Wanted(
            channel_key(conversation_id),
            f"/teams/{team_id}/channels/{channel_id}/messages",
            "created,updated",
            CHAT_MAX_LIFETIME - CLOCK_ALLOWANCE,
            self.notification_url,
            self.lifecycle_url,
        )

    def wanted(
        self, watched: Iterable[str] | None, kept: Iterable[SubscriptionKey]
    ) -> tuple[Wanted, ...]:
        """The channels to subscribe: those kept that are still watched first (no churn when the list
        grows past the limit), then the rest in order, up to the limit. ``watched`` None (the list is
        unreadable this cycle): the channels kept, so nothing is deleted on a failed read."""
        kept_ids = sorted(k.conversation_id for k in kept if k.source is Source.CHANNEL)
        listed = set(kept_ids) if watched is None else set(watched)
        ordered = [c for c in kept_ids if c in listed] + sorted(listed - set(kept_ids))
        chosen: list[Wanted] = []
        for conversation_id in ordered:
            if len(chosen) >= self.limit:
                break
            try:
                chosen.append(self.subscription(conversation_id))
            except ValueError:
                continue  # not a channel id: nothing to subscribe to
        return tuple(chosen)


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
    kept: Mapping[SubscriptionKey, Kept],
    events: Iterable[LifecycleEvent],
    now: datetime,
    *,
    channel_creates: int | None = None,
) -> list[Decision]:
    """What to do for each wanted subscription. Events about a subscription the record does not keep
    are a former one's and change nothing. At most ``channel_creates`` channel subscriptions are
    created or recreated (None: no bound); the rest wait for a later cycle."""
    by_id: dict[str, set[str]] = {}
    for event in events:
        by_id.setdefault(event.subscription_id, set()).add(event.event)
    decisions: list[Decision] = []
    budget = channel_creates
    for w in wanted:
        decision = _decide_one(w, kept.get(w.key), by_id, now)
        if decision is None:
            continue
        if w.kind is Source.CHANNEL and decision.action in (Action.CREATE, Action.RECREATE):
            if budget is not None and budget <= 0:
                continue
            budget = None if budget is None else budget - 1
        decisions.append(decision)
    return decisions


def _decide_one(
    w: Wanted, current: Kept | None, by_id: Mapping[str, set[str]], now: datetime
) -> Decision | None:
    if current is None:
        return Decision(w, Action.CREATE, "none kept")
    seen = by_id.get(current.id, set())
    if current.resource != w.resource or current.notification_url != w.notification_url:
        return Decision(w, Action.RECREATE, "settings changed", current)
    if "subscriptionRemoved" in seen:
        return Decision(w, Action.RECREATE, "subscriptionRemoved", current)
    if now >= current.expires_at:
        return Decision(w, Action.RECREATE, "expired", current)  # Graph deletes it silently
    if current.expires_at - now <= w.renew_before:
        return Decision(w, Action.RENEW, "due", current)  # a renewal also reauthorizes
    if "reauthorizationRequired" in seen:
        return Decision(w, Action.REAUTHORIZE, "reauthorizationRequired", current)
    return None


def unwanted(
    wanted: Iterable[Wanted], kept: Mapping[SubscriptionKey, Kept], *, at_most: int
) -> list[SubscriptionKey]:
    """Kept subscriptions nothing asks for any more (a channel left the watched list, or is past the
    limit), to delete: at most ``at_most`` a cycle, in key order."""
    keys = {w.key for w in wanted}
    return sorted((k for k in kept if k not in keys), key=lambda k: k.text)[:at_most]


def mail_missed(kept: Mapping[SubscriptionKey, Kept], events: Iterable[LifecycleEvent]) -> bool:
    """Graph dropped Inbox notifications (``missed``): read the mail rather than wait for the poll."""
    mail = kept.get(MAIL_KEY)
    return any(
        e.event == "missed" and (mail is None or e.subscription_id == mail.id) for e in events
    )
