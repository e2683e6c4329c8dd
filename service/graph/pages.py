"""One page of a Graph collection, read leniently: a bad item is skipped, a bad envelope is an error.

A single malformed message must not hide the rest of its page from the poll loop, so each item is
validated on its own; a skipped item is logged by id only (never its body) and counted, both on the
page (``skipped``, so a caller can decide not to move a cursor past it) and in the metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from service.graph.errors import GraphPayloadError
from service.telemetry.metrics import GraphMetrics

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

NEXT_LINK = "@odata.nextLink"


@dataclass(frozen=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    next_link: str | None
    skipped: int = 0


def parse_item(raw: Any, model: type[T], *, kind: str, metrics: GraphMetrics) -> T | None:
    """``raw`` as ``model``, or None (logged by id, counted) when it is not a valid item."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        # Only locations and error types: ``exc.errors()`` also holds the input, which may be a body.
        problems = ", ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<item>'}:{err['type']}"
            for err in exc.errors()[:5]
        )
        log.warning("skipped a malformed %s item id=%s (%s)", kind, _item_id(raw), problems)
        metrics.graph_malformed_items.labels(kind=kind).inc()
        return None


def parse_page(payload: Any, model: type[T], *, kind: str, metrics: GraphMetrics) -> Page[T]:
    """A collection response as a Page; raises GraphPayloadError when the envelope itself is wrong."""
    if not isinstance(payload, dict):
        raise GraphPayloadError(
            f"Graph answered a {kind} listing with {type(payload).__name__}, not an object; "
            "nothing on this page was read (it is retried on the next cycle)"
        )
    values = payload.get("value")
    if not isinstance(values, list):
        raise GraphPayloadError(
            f"Graph's {kind} page has no 'value' list; nothing on this page was read (it is retried on the next cycle)"
        )
    next_link = payload.get(NEXT_LINK)
    if next_link is not None and (not isinstance(next_link, str) or not next_link):
        raise GraphPayloadError(
            f"Graph's {kind} page has an unusable {NEXT_LINK}; paging stopped there"
        )
    items = [
        item
        for raw in values
        if (item := parse_item(raw, model, kind=kind, metrics=metrics)) is not None
    ]
    return Page(items=tuple(items), next_link=next_link, skipped=len(values) - len(items))


def _item_id(raw: Any) -> str:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return repr(ident[:120]) if isinstance(ident, str) else "<none>"
