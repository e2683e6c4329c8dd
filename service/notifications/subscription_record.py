"""The fleet's record of its Graph change-notification subscriptions: ``notifications/subscriptions.json``,
the ids, resources and expiries the subscription manager keeps (service.notifications.subscriptions),
and how far it has acted on the lifecycle events. Written with If-Match on the record read in the
same cycle, so a former holder that still believes in its lease cannot overwrite its successor's.

One entry per subscription, keyed by ``SubscriptionKey.text``: ``chat`` and ``mail`` for the agent
user's one chat and one Inbox subscription (the keys the record had before channels, so a record
written by that version reads back unchanged and nothing is recreated), and
``channel:<team id>/<channel id>`` for each watched channel. A key this version does not know is
left out, as before (a version that does not know channels leaves their entries out the same way;
the subscriptions it no longer keeps expire on their own).
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
_PER_CONVERSATION = ":"


@dataclass(frozen=True, slots=True)
class SubscriptionKey:
    """Which subscription an entry is: a source's one subscription, or one conversation's."""

    source: Source
    conversation_id: str = ""  # a channel's ``<team id>/<channel id>``; "" for chat and mail

    @property
    def text(self) -> str:
        name = self.source.subscription_name
        return f"{name}{_PER_CONVERSATION}{self.conversation_id}" if self.conversation_id else name

    @classmethod
    def parse(cls, text: str) -> SubscriptionKey | None:
        """The key ``text`` names; None for one from another version."""
        name, separator, conversation_id = text.partition(_PER_CONVERSATION)
        source = Source.from_subscription_name(name)
        if (
            source is None
            or bool(separator) != (source is Source.CHANNEL)
            or (separator and not conversation_id)
        ):
            return None
        return cls(source, conversation_id)


CHAT_KEY = SubscriptionKey(Source.CHAT)
MAIL_KEY = SubscriptionKey(Source.EMAIL)


def channel_key(conversation_id: str) -> SubscriptionKey:
    return SubscriptionKey(Source.CHANNEL, conversation_id)


@dataclass(frozen=True, slots=True)
class Kept:
    """A subscription as the record keeps it."""

    id: str
    resource: str
    expires_at: datetime
    notification_url: str


@dataclass(frozen=True)
class SubscriptionsRecord:
    kept: Mapping[SubscriptionKey, Kept] = field(default_factory=dict)
    lifecycle_offset: int = 0  # characters of notifications/lifecycle.jsonl already acted on


def parse_record(text: str) -> SubscriptionsRecord:
    obj = load_object(text, _WHAT)
    offset = obj.get("lifecycle_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise CorruptValueError(f"{_WHAT}: field 'lifecycle_offset' must be a non-negative integer")
    subs = obj.get("subscriptions", {})
    if not isinstance(subs, dict):
        raise CorruptValueError(f"{_WHAT}: field 'subscriptions' must be an object")
    kept: dict[SubscriptionKey, Kept] = {}
    for name, entry in subs.items():
        key = SubscriptionKey.parse(name)
        if key is None or not isinstance(entry, dict):
            continue  # a kind from a newer version: left alone, not guessed at
        kept[key] = Kept(
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
                key.text: {
                    "id": k.id,
                    "resource": k.resource,
                    "expires_at": format_timestamp(k.expires_at),
                    "notification_url": k.notification_url,
                }
                for key, k in record.kept.items()
            },
        },
        sort_keys=True,
    )
