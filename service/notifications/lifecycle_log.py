"""Lifecycle notifications, from whichever replica Graph reached to the one that manages subscriptions.

Graph posts a lifecycle event (reauthorizationRequired, subscriptionRemoved, missed) to the lifecycle
URL behind the load balancer, so it lands on any replica, usually not the lease holder. The receiving
replica appends it to one append blob, ``notifications/lifecycle.jsonl``, before answering Graph (a
failed append answers 503 and Graph sends it again), and the subscription manager reads the lines
past the offset kept in its own CAS'd record. So an event is acted on by exactly the replica that
holds the ``subscription_manager`` lease, and a takeover continues from the recorded offset.

Why one append blob rather than per-minute segments like the hints: lifecycle events are rare (a
few per subscription and day) and the manager must not miss one whatever its downtime, so it reads
the whole tail from its offset; one append per event stays far inside an append blob's 50,000 blocks
for years. Acting on an event twice is harmless (a second reauthorize or renewal), so no event id
is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from service.clock import format_timestamp, parse_timestamp
from service.notifications.payloads import ChangeNotification
from service.storage.backend import MemoryBackend

LIFECYCLE_KEY = "notifications/lifecycle.jsonl"
EVENTS = ("reauthorizationRequired", "subscriptionRemoved", "missed")


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    subscription_id: str
    event: str
    received_at: datetime


def render_event(event: LifecycleEvent) -> str:
    return (
        json.dumps(
            {
                "sub": event.subscription_id,
                "event": event.event,
                "at": format_timestamp(event.received_at),
            },
            separators=(",", ":"),
            sort_keys=True,
        )
        + "\n"
    )


def parse_event_line(line: str) -> LifecycleEvent | None:
    """An event, or None for a line that is not one (torn or from a newer version): skipped, since the
    renewal schedule and the 404 on renewal find a lost subscription anyway, only later."""
    try:
        obj = json.loads(line)
        sub, event, at = obj["sub"], obj["event"], parse_timestamp(obj["at"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(sub, str) or not sub or event not in EVENTS:
        return None
    return LifecycleEvent(sub, event, at)


def event_of(item: ChangeNotification, now: datetime) -> LifecycleEvent | None:
    if not item.subscription_id or item.lifecycle_event not in EVENTS:
        return None
    return LifecycleEvent(item.subscription_id, item.lifecycle_event, now)


async def record_event(backend: MemoryBackend, event: LifecycleEvent) -> None:
    """One atomic append; raises StorageError (then the receiver asks Graph to send it again)."""
    await backend.append_text(LIFECYCLE_KEY, render_event(event))


async def read_events(backend: MemoryBackend, offset: int) -> tuple[list[LifecycleEvent], int]:
    """The whole events past ``offset`` (characters) and the new offset; raises StorageError.

    An offset beyond the blob (the blob was deleted and begun again) reads it from the start: acting
    on an old event again is harmless, skipping a new one is not."""
    text = await backend.read_text(LIFECYCLE_KEY) or ""
    start = offset if offset <= len(text) else 0
    end = text.rfind("\n", start) + 1
    if end <= start:
        return [], start
    events = [
        e for line in text[start:end].splitlines() if (e := parse_event_line(line)) is not None
    ]
    return events, end
