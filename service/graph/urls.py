"""Graph URLs: the configured origin, route templates for metrics, ids as path segments, timestamps.

``@odata.nextLink`` is followed only when it points at the configured Graph origin, so the token never
leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from urllib.parse import quote, urlencode

import httpx

MAX_TOP = 50  # Graph's ceiling for $top on chats, chat messages and (as used here) mail
_DEFAULT_PORTS = {"http": 80, "https": 443}


class GraphUrls:
    """Absolute URLs on one Graph base, each with its route template (never a raw id) for metrics."""

    def __init__(self, base_url: str) -> None:
        base = httpx.URL(base_url.rstrip("/"))
        if base.scheme not in _DEFAULT_PORTS or not base.host:
            raise ValueError(
                f"the Graph base URL must be an absolute http(s) URL, got {base_url!r} (set ENTRABOT_GRAPH_URL)"
            )
        self.base = str(base)
        self._origin = _origin(base)

    def url(
        self, template: str, *ids: str, params: Mapping[str, str | int] | None = None
    ) -> tuple[str, str]:
        """(absolute URL, route template for metrics) from e.g. ``"chats/{}/messages"`` and the ids."""
        url = f"{self.base}/{template.format(*(_segment(i) for i in ids))}"
        if params:
            # Built by hand rather than by httpx's params, which would send "%24filter" and "+" for
            # spaces; Graph documents the literal "$" names and %20.
            url += "?" + urlencode(params, quote_via=quote, safe="$:'(),")
        return url, template.replace("{}", "{id}")

    def same_origin(self, link: str) -> bool:
        try:
            return _origin(httpx.URL(link)) == self._origin
        except httpx.InvalidURL:
            return False


def graph_timestamp(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds, as Graph compares it; truncated, never rounded up, so a
    ``gt`` filter can only include more, never skip a message in the same millisecond."""
    if moment.tzinfo is None:
        raise ValueError("Graph timestamps must be timezone-aware (use datetime.now(timezone.utc))")
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def check_top(top: int) -> int:
    if not 1 <= top <= MAX_TOP:
        raise ValueError(f"$top must be between 1 and {MAX_TOP} (Graph refuses more), got {top}")
    return top


def _segment(value: str) -> str:
    """One path segment from an id. Ids reach here from model tool calls too, so one that could
    climb out of its collection ("..", "a/b") is refused or escaped."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ValueError(f"not a usable Graph id: {value!r}")
    return quote(value, safe=":@")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host.lower(), url.port or _DEFAULT_PORTS.get(url.scheme)
