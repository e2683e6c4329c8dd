"""@odata.nextLink: the request's own URL with its skip token (or $skip) replaced."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, urlencode


def next_link(url: str, pairs: Iterable[tuple[str, str]], replace: str, value: str) -> str:
    kept = [(k, v) for k, v in pairs if k.lower() != replace]
    kept.append((replace, value))
    return url + "?" + urlencode(kept, quote_via=quote, safe="$:,'()")
