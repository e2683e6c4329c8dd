"""The OData query options of the channel-message routes, and the rules Graph documents for them.

Read, not run (no tenant):
- "List channel messages": ``$top`` "The default page size is 20 messages. You can extend up to 50
  channel messages per page"; ``$expand`` (replies: "By default, a response can include up to 1000
  replies"); "The other OData query parameters are not currently supported".
- "List replies": "You can use the $top query parameter ... The maximum $top value allowed is 50.
  Other OData query parameters are currently not supported".
- "chatMessage: delta": ``$top`` ("The upper limit is 50"), ``$skip``, ``$filter`` ("The only property
  that supports filtering is lastModifiedDateTime, and only the gt operator is supported"), ``$expand``
  ("Only replies is supported"); "If you use any query parameter (other than $deltatoken and
  $skiptoken), you must specify it in the initial delta request. Microsoft Graph automatically encodes
  any specified parameters into the token portion of the @odata.nextLink or @odata.deltaLink". $skip
  is not modelled (refused as an option the route does not allow).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from emulator.errors import bad_request
from emulator.odata import decode_token, encode_token, parse_filter, parse_top, query_options

MAX_TOP = 50
DEFAULT_TOP = 20
MAX_EXPANDED_REPLIES = 1000


def _expand_replies(options: dict[str, str]) -> bool:
    if "$expand" not in options:
        return False
    if options["$expand"].strip().lower() != "replies":
        raise bad_request(
            f"Parsing OData Select and Expand failed: Could not find a property named "
            f"'{options['$expand'].strip()}' on type 'microsoft.graph.chatMessage'; only replies "
            "can be expanded."
        )
    return True


@dataclass(frozen=True)
class PageQuery:
    top: int
    expand_replies: bool
    cursor: tuple[int, int] | None  # (sort key in µs, message id) of the previous page's last item


def parse_messages_query(pairs: Iterable[tuple[str, str]], *, replies: bool) -> PageQuery:
    """``GET …/messages`` (``replies`` False) or ``GET …/messages/{id}/replies`` (True)."""
    allowed = {"$top", "$skiptoken"} | (set() if replies else {"$expand"})
    options = query_options(pairs, allowed)
    top = parse_top(options.get("$top"), maximum=MAX_TOP, default=DEFAULT_TOP)
    cursor = None
    if "$skiptoken" in options:
        data = decode_token(
            options["$skiptoken"], kind="channelReplies" if replies else "channelMessages"
        )
        cursor = (int(data["key"]), int(data["id"]))
    return PageQuery(top, _expand_replies(options), cursor)


def page_token(*, replies: bool, key: int, message_id: str) -> str:
    kind = "channelReplies" if replies else "channelMessages"
    return encode_token({"kind": kind, "key": key, "id": int(message_id)})


@dataclass(frozen=True)
class DeltaQuery:
    channel_id: str
    top: int
    expand_replies: bool
    since_us: int | None  # $filter=lastModifiedDateTime gt …, exclusive
    after_version: int  # only roots changed after this change number
    upto_version: int | None  # a round in progress: only up to this one (None: a new round)

    def next_token(self, after_version: int, upto_version: int) -> str:
        return encode_token(self._data("channelDelta", after_version) | {"upto": upto_version})

    def delta_token(self, after_version: int) -> str:
        return encode_token(self._data("channelDeltaLink", after_version))

    def _data(self, kind: str, after: int) -> dict[str, object]:
        return {
            "kind": kind,
            "channel": self.channel_id,
            "after": after,
            "top": self.top,
            "expand": self.expand_replies,
            "since": self.since_us,
        }


def parse_delta_query(channel_id: str, pairs: Iterable[tuple[str, str]]) -> DeltaQuery:
    options = query_options(pairs, {"$top", "$filter", "$expand", "$skiptoken", "$deltatoken"})
    tokens = [k for k in ("$skiptoken", "$deltatoken") if k in options]
    if tokens:
        if len(options) > 1:
            raise bad_request(
                "Query options other than $deltatoken and $skiptoken belong in the initial delta "
                "request; follow @odata.nextLink or @odata.deltaLink as it is."
            )
        kind = "channelDelta" if tokens[0] == "$skiptoken" else "channelDeltaLink"
        data = decode_token(options[tokens[0]], kind=kind)
        if data.get("channel") != channel_id:
            raise bad_request("The delta token belongs to another channel; start a new round here.")
        since = data.get("since")
        return DeltaQuery(
            channel_id,
            int(data["top"]),
            bool(data["expand"]),
            None if since is None else int(since),
            int(data["after"]),
            int(data["upto"]) if kind == "channelDelta" else None,
        )
    since_us = None
    if "$filter" in options:
        clauses = parse_filter(options["$filter"])
        for clause in clauses:
            if clause.prop.lower() != "lastmodifieddatetime" or clause.op != "gt":
                raise bad_request(
                    f"The entity property '{clause.prop}' and operator '{clause.op}' are not allowed "
                    "in $filter query: only lastModifiedDateTime gt is supported on delta."
                )
            since_us = max(since_us or 0, clause.datetime_us())
    top = parse_top(options.get("$top"), maximum=MAX_TOP, default=DEFAULT_TOP)
    return DeltaQuery(channel_id, top, _expand_replies(options), since_us, 0, None)
