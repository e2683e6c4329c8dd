"""Records written by the single-host system, renamed into the fleet's fields before they are parsed.

The seeds name the keys these records live under and how they are shared, not their fields:

    "tools/interaction_log.py — appends to and reads interactions/<YYYY-MM-DD>.jsonl."
    "tools/promises.py — reads/writes the single key promises.jsonl."
    (seeds/storage-and-memory.txt, "What actually routes through MemoryBackend")

and SPEC §4 requires that "an existing container can be served by the fleet as it is". The fields
below are the single-host system's own, read (not run) from its source, microsoft/entrabot at 3e6289f:

* ``tools/interaction_log.py``, "Schema (per entry)": ``id``, ``ts``, ``channel`` ("teams_dm" |
  "teams_group" | "teams_unknown" | "email" | "terminal"), ``direction`` ("inbound" | "outbound"),
  ``sender``, ``recipient`` (optional; chat_id, email, or None), ``summary``, ``action`` (optional),
  ``content_ref`` (optional; message_id or other pointer), ``metadata`` (optional dict). Its daily
  summary finds a Teams record's chat in ``metadata.chat_id`` when inbound and in ``recipient`` when
  outbound; that rule is kept here.
* ``tools/promises.py``, ``Promise``: ``id``, ``created_at``, ``chat_id``, ``description``,
  ``due_by`` ("Optional ISO-8601 deadline"), ``status``, ``resolved_at``, ``resolution``.

Only the translated copy is parsed; the original fields stay in the record's unknown fields, so a
promise the fleet rewrites still carries ``description`` and ``due_by`` for a single-host reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time, timezone
from typing import Any

from service.clock import format_timestamp, parse_timestamp

_DIRECTIONS = {"inbound": "in", "outbound": "out"}
_EMAIL, _TERMINAL, _CHAT = "email", "terminal", "chat"
# "teams_unknown" is its label for a chat id of a kind it did not recognise: every teams_* is a chat.
_TEAMS_CHANNELS_START = "teams_"
# A single-host record without ``action`` says only which way it went.
_ACTION_BY_DIRECTION = {"in": "received", "out": "sent"}


def is_single_host_interaction(obj: Mapping[str, Any]) -> bool:
    """The single-host system spells directions out; the fleet writes ``in`` / ``out``."""
    return obj.get("direction") in _DIRECTIONS


def fleet_interaction_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A single-host interaction record under the fleet's field names; any other record unchanged."""
    fields = dict(obj)
    if not is_single_host_interaction(obj):
        return fields
    direction = _DIRECTIONS[obj["direction"]]
    channel = _channel(obj.get("channel"))
    fields["direction"] = direction
    fields["channel"] = channel
    if not obj.get("action"):
        fields["action"] = _ACTION_BY_DIRECTION[direction]
    fields["chat_id"] = _chat_id(obj, channel, direction)
    fields["message_id"] = _text_or_none(obj.get("content_ref"))
    return fields


def fleet_promise_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A single-host promise under the fleet's field names (``text``, ``due_at``); a fleet one unchanged."""
    fields = dict(obj)
    if "text" not in obj and isinstance(obj.get("description"), str):
        fields["text"] = obj["description"]
    if "due_at" not in obj and "due_by" in obj:
        fields["due_at"] = _deadline(obj["due_by"])
    if "text" not in obj and obj.get("chat_id") == "":
        fields["chat_id"] = None  # its "no chat"; the fleet writes null
    return fields


def _channel(word: Any) -> Any:
    if word in (_EMAIL, _TERMINAL):
        return word
    if isinstance(word, str) and word.startswith(_TEAMS_CHANNELS_START):
        return _CHAT
    return word  # not a channel either system writes: the parser calls the record corrupt


def _chat_id(obj: Mapping[str, Any], channel: Any, direction: str) -> str | None:
    if channel != _CHAT:
        return None
    metadata = obj.get("metadata")
    from_metadata = metadata.get("chat_id") if isinstance(metadata, Mapping) else None
    if isinstance(from_metadata, str) and from_metadata:
        return from_metadata
    return _text_or_none(obj.get("recipient")) if direction == "out" else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _deadline(value: Any) -> str | None:
    """``due_by`` was free text checked by nobody: a timestamp is kept, a bare date is its first moment
    (UTC), anything else is no deadline here (the original stays in the record's unknown fields)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return format_timestamp(parse_timestamp(value))
    except ValueError:
        pass
    try:
        day = date.fromisoformat(value.strip())
    except ValueError:
        return None
    return format_timestamp(datetime.combine(day, time.min, tzinfo=timezone.utc))
