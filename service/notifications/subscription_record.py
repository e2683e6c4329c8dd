"""The fleet's record of its Graph change-notification subscriptions: ``notifications/subscriptions.json``,
the ids, resources and expiries the subscription manager keeps (service.notifications.subscriptions),
and how far it has acted on the lifecycle events. Written with If-Match on the record read in the
same cycle, so a former holder that still believes in its lease cannot overwrite its successor's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.clock import format_timestamp
from service.domain.source import Source
from service.ledger.records.fields import load_object, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError

RECORD_KEY = "notifications/subscriptions.json"
_WHAT = "subscriptions record"


@dataclass(frozen=True, slots=True)
class Kept:
    """A subscription as the record keeps it."""

    id: str
    resource: str
    expires_at: datetime
    notification_url: str


@dataclass(frozen=True)
class SubscriptionsRecord:
    kept: Mapping[Source, Kept] = field(default_factory=dict)
    lifecycle_offset: int = 0  # characters of notifications/lifecycle.jsonl already acted on


def parse_record(text: str) -> SubscriptionsRecord:
    obj = load_object(text, _WHAT)
    offset = obj.get("lifecycle_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise CorruptValueError(f"{_WHAT}: field 'lifecycle_offset' must be a non-negative integer")
    subs = obj.get("subscriptions", {})
    if not isinstance(subs, dict):
        raise CorruptValueError(f"{_WHAT}: field 'subscriptions' must be an object")
    kept: dict[Source, Kept] = {}
    for name, entry in subs.items():
        kind = Source.from_subscription_name(name)
        if kind is None or not isinstance(entry, dict):
            continue  # a kind from a newer version: left alone, not guessed at
        kept[kind] = Kept(
            require_str(entry, "id", _WHAT),
            require_str(entry, "resource", _WHAT),
            require_timestamp(entry, "expires_at", _WHAT),
            require_str(entry, "notification_url", _WHAT),
        )
    return SubscriptionsRecord(kept, offset)


def render_record(record: SubscriptionsRecord) -> str:
    return json.dumps(
        {
            "lifecycle_offset": record.lifecycle_offset,
            "subscriptions": {
                kind.subscription_name: {
                    "id": k.id,
                    "resource": k.resource,
                    "expires_at": format_timestamp(k.expires_at),
                    "notification_url": k.notification_url,
                }
                for kind, k in sorted(
                    record.kept.items(), key=lambda item: item[0].subscription_name
                )
            },
        },
        sort_keys=True,
    )
