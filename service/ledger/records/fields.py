"""Typed reading of the JSON records the ledgers store, and the fields this version does not know.

Records are read strictly (a wrong type is a corrupt record, never a guess), and any field a newer
replica added is kept verbatim through our rewrites, so replicas of two versions can share a
container without one stripping the other's data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from service.clock import format_timestamp, parse_timestamp
from service.ledger.records.reads import CorruptValueError

# Unknown fields as (name, JSON text) pairs, sorted by name: hashable, comparable, order-free.
ExtraFields = tuple[tuple[str, str], ...]


def load_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptValueError(f"{what} is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict):
        raise CorruptValueError(f"{what} is not a JSON object")
    return value


def require_str(obj: Mapping[str, Any], name: str, what: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise CorruptValueError(f"{what}: field {name!r} must be a non-empty string")
    return value


def optional_str(obj: Mapping[str, Any], name: str, what: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise CorruptValueError(f"{what}: field {name!r} must be a string or null")
    return value


def optional_timestamp(obj: Mapping[str, Any], name: str, what: str) -> datetime | None:
    value = optional_str(obj, name, what)
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        raise CorruptValueError(f"{what}: field {name!r} is not an RFC 3339 timestamp") from None


def require_timestamp(obj: Mapping[str, Any], name: str, what: str) -> datetime:
    value = optional_timestamp(obj, name, what)
    if value is None:
        raise CorruptValueError(f"{what}: field {name!r} is required")
    return value


def str_list(obj: Mapping[str, Any], name: str, what: str, *, required: bool = False) -> list[str]:
    if name not in obj and not required:
        return []
    value = obj.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CorruptValueError(f"{what}: field {name!r} must be a list of strings")
    return value


def timestamp_text(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def extra_fields(obj: Mapping[str, Any], known: Iterable[str]) -> ExtraFields:
    known_set = frozenset(known)
    return tuple(
        sorted(
            (name, json.dumps(value, sort_keys=True))
            for name, value in obj.items()
            if name not in known_set
        )
    )


def with_extra(obj: dict[str, Any], extra: ExtraFields) -> dict[str, Any]:
    """``obj`` plus the preserved unknown fields (never overriding a field this version writes)."""
    for name, text in extra:
        obj.setdefault(name, json.loads(text))
    return obj


def merge_extra(a: ExtraFields, b: ExtraFields) -> ExtraFields:
    """Union of two sets of unknown fields; on a clash the larger JSON text wins, so the merge commutes."""
    merged: dict[str, str] = {}
    for name, text in (*a, *b):
        merged[name] = max(merged.get(name, text), text)
    return tuple(sorted(merged.items()))
