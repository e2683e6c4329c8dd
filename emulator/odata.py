"""The OData query options each route accepts, and the rules Graph enforces on them.

Pure functions from the request's query parameters to a typed query, raising the 400 Graph gives.
Graph is strict per route: chat messages order only descending and filter only on the ordered
property; chats cannot be ordered at all; mail enforces the InefficientFilter rule.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from emulator.errors import GraphError, bad_request
from emulator.timestamps import parse_iso

_DATETIME_PROPS = {"lastModifiedDateTime", "createdDateTime", "receivedDateTime", "sentDateTime"}
_OPS = {
    "eq": "Equal",
    "ne": "NotEqual",
    "gt": "GreaterThan",
    "ge": "GreaterThanOrEqual",
    "lt": "LessThan",
    "le": "LessThanOrEqual",
}
_CLAUSE = re.compile(
    r"\s*([A-Za-z][\w/]*)\s+(eq|ne|gt|ge|lt|le)\s+('(?:[^']|'')*'|[^\s']+)\s*", re.IGNORECASE
)
_AND = re.compile(r"and(?=\s)", re.IGNORECASE)


def _not_allowed(option: str) -> GraphError:
    return bad_request(
        f"The query specified in the URI is not valid. Query option '{option}' is not allowed. "
        "To allow it, set the 'AllowedQueryOptions' property on EnableQueryAttribute or "
        "QueryValidationSettings."
    )


def query_options(pairs: Iterable[tuple[str, str]], allowed: set[str]) -> dict[str, str]:
    """The $-options of a request, keyed in lower case; repeats and options the route refuses are 400."""
    options: dict[str, str] = {}
    for key, value in pairs:
        if not key.startswith("$"):
            continue
        name = key.lower()
        if name in options:
            raise bad_request(
                f"Query option '{key}' was specified more than once, but it must be specified at "
                "most once."
            )
        if name not in allowed:
            raise _not_allowed(key)
        options[name] = value
    return options


def parse_top(value: str | None, *, maximum: int, default: int) -> int:
    """$top as the Teams routes check it."""
    if value is None:
        return default
    if not value.isdigit():
        raise bad_request(
            f"Invalid value '{value}' for $top query option found. The $top query option requires "
            "a non-negative integer value."
        )
    top = int(value)
    if top > maximum:
        raise bad_request(
            f"The limit of '{maximum}' for Top query has been exceeded. The value from the incoming "
            f"request is '{top}'."
        )
    return max(top, 1)


def parse_outlook_top(value: str | None, *, maximum: int, default: int) -> int:
    """$top as the Outlook routes check it: 1 to ``maximum``."""
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= maximum:
        raise bad_request(
            f"The value of $top must be an integer between 1 and {maximum}; it was '{value}'.",
            "ErrorInvalidUrlQuery",
        )
    return int(value)


@dataclass(frozen=True)
class Clause:
    prop: str
    op: str  # eq ne gt ge lt le
    raw: str  # the literal as written

    def datetime_us(self) -> int:
        if self.raw.startswith("'"):
            raise bad_request(
                f"Invalid filter clause: the value for '{self.prop}' is a quoted string; write the "
                "DateTimeOffset literal unquoted, e.g. 2026-11-29T10:00:00Z."
            )
        try:
            dt = parse_iso(self.raw)
        except ValueError:
            raise bad_request(
                f"Invalid filter clause: '{self.raw}' is not a DateTimeOffset literal."
            ) from None
        return int(dt.timestamp()) * 1_000_000 + dt.microsecond

    def string(self) -> str:
        if not (self.raw.startswith("'") and self.raw.endswith("'") and len(self.raw) >= 2):
            raise bad_request(
                f"Invalid filter clause: the value for '{self.prop}' must be a quoted string."
            )
        return self.raw[1:-1].replace("''", "'")

    def boolean(self) -> bool:
        if self.raw.lower() not in ("true", "false"):
            raise bad_request(
                f"Invalid filter clause: the value for '{self.prop}' must be true or false."
            )
        return self.raw.lower() == "true"


def parse_filter(text: str) -> list[Clause]:
    """Clauses joined by ``and``: the subset of OData these routes accept. Anything else is 400."""
    clauses, pos = [], 0
    while True:
        match = _CLAUSE.match(text, pos)
        if match is None:
            raise bad_request(
                f"Invalid filter clause: could not parse '{text[pos:].strip() or text}'. Only "
                "'property op value' comparisons joined by 'and' are supported."
            )
        clauses.append(Clause(match.group(1), match.group(2).lower(), match.group(3)))
        pos = match.end()
        if pos >= len(text):
            return clauses
        joiner = _AND.match(text, pos)
        if joiner is None:
            raise bad_request(f"Invalid filter clause: expected 'and' at '{text[pos:].strip()}'.")
        pos = joiner.end()


# --- skip tokens (opaque to clients) ---


def encode_token(data: dict[str, Any]) -> str:
    return (
        base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode())
        .decode()
        .rstrip("=")
    )


def decode_token(token: str, *, kind: str) -> dict[str, Any]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(data, dict) or data.get("kind") != kind:
            raise ValueError(kind)
        return data
    except ValueError:
        raise bad_request(
            "The $skiptoken is invalid: pass the @odata.nextLink of the previous page as it is."
        ) from None


# --- GET /chats/{id}/messages ---


@dataclass(frozen=True)
class ChatMessagesQuery:
    top: int
    order: Literal["lastModifiedDateTime", "createdDateTime"]
    after_us: int | None  # exclusive lower bound on the ordered property
    before_us: int | None  # exclusive upper bound
    cursor: (
        tuple[int, int] | None
    )  # (order key in µs, message id) of the last item of the previous page


def parse_chat_messages_query(pairs: Iterable[tuple[str, str]]) -> ChatMessagesQuery:
    options = query_options(pairs, {"$top", "$orderby", "$filter", "$skiptoken"})
    top = parse_top(options.get("$top"), maximum=50, default=20)
    order: Literal["lastModifiedDateTime", "createdDateTime"] = "lastModifiedDateTime"
    explicit_order = "$orderby" in options
    if explicit_order:
        parts = options["$orderby"].split()
        prop = _canonical(parts[0] if parts else "", ("lastModifiedDateTime", "createdDateTime"))
        if prop is None or len(parts) > 2 or "," in options["$orderby"]:
            raise bad_request(
                f"QueryOptions to order by '{options['$orderby']}' is not supported. Order by "
                "lastModifiedDateTime desc or createdDateTime desc."
            )
        direction = parts[1].lower() if len(parts) == 2 else "asc"
        if direction != "desc":
            raise bad_request(
                f"QueryOptions to order by '{prop}' in 'Ascending' direction is not supported; "
                "only descending order is."
            )
        order = prop  # type: ignore[assignment]
    after = before = None
    if "$filter" in options:
        if not explicit_order:
            raise bad_request(
                "$filter on chat messages requires $orderby on the same property: use "
                "$orderby=lastModifiedDateTime desc with a lastModifiedDateTime filter, or "
                "$orderby=createdDateTime desc with a createdDateTime filter."
            )
        for clause in parse_filter(options["$filter"]):
            prop = _canonical(clause.prop, ("lastModifiedDateTime", "createdDateTime"))
            if prop is None:
                raise bad_request(
                    f"The entity property '{clause.prop}' is not allowed in $filter query."
                )
            if prop != order:
                raise bad_request(
                    f"$filter on '{prop}' requires $orderby={prop} desc; the request orders by "
                    f"'{order}'."
                )
            allowed = ("gt", "lt") if prop == "lastModifiedDateTime" else ("lt",)
            if clause.op not in allowed:
                raise bad_request(
                    f"The entity property '{prop}' and operationKind '{_OPS[clause.op]}' is not "
                    "allowed in $filter query."
                )
            if clause.op == "gt":
                after = clause.datetime_us() if after is None else max(after, clause.datetime_us())
            else:
                before = (
                    clause.datetime_us() if before is None else min(before, clause.datetime_us())
                )
    cursor = None
    if "$skiptoken" in options:
        data = decode_token(options["$skiptoken"], kind="chatMessages")
        if data.get("order") != order:
            raise bad_request(
                "The $skiptoken was issued for a different $orderby; follow @odata.nextLink as it is."
            )
        cursor = (int(data["key"]), int(data["id"]))
    return ChatMessagesQuery(top, order, after, before, cursor)


# --- GET /me/chats ---


@dataclass(frozen=True)
class ChatsQuery:
    top: int
    expand: frozenset[str]
    chat_type: str | None
    cursor: tuple[int, str] | None  # (the sort key in µs, chat id)
    by_last_message: bool = False  # $orderby=lastMessagePreview/createdDateTime desc


def parse_chats_query(pairs: Iterable[tuple[str, str]]) -> ChatsQuery:
    options = query_options(pairs, {"$top", "$expand", "$filter", "$orderby", "$skiptoken"})
    by_last_message = False
    if "$orderby" in options:
        # "List chats" documents one ordering: lastMessagePreview/createdDateTime, descending only.
        ordered_by, _, direction = options["$orderby"].strip().partition(" ")
        if (
            ordered_by.strip().lower() != "lastmessagepreview/createddatetime"
            or direction.strip().lower() != "desc"
        ):
            raise bad_request(
                f"QueryOptions to order by '{options['$orderby']}' is not supported; the only "
                "ordering is 'lastMessagePreview/createdDateTime desc'."
            )
        by_last_message = True
    top = parse_top(options.get("$top"), maximum=50, default=20)
    expand: set[str] = set()
    for item in filter(None, (x.strip() for x in options.get("$expand", "").split(","))):
        prop = _canonical(item, ("members", "lastMessagePreview"))
        if prop is None:
            raise bad_request(
                f"Parsing OData Select and Expand failed: Could not find a property named '{item}' "
                "on type 'microsoft.graph.chat'."
            )
        expand.add(prop)
    chat_type = None
    if "$filter" in options:
        clauses = parse_filter(options["$filter"])
        if len(clauses) != 1 or clauses[0].prop != "chatType" or clauses[0].op != "eq":
            raise bad_request(
                "Invalid filter clause: chats can be filtered only with chatType eq '...'."
            )
        chat_type = clauses[0].string()
    cursor = None
    if "$skiptoken" in options:
        data = decode_token(options["$skiptoken"], kind="chats")
        if bool(data.get("by_last_message", False)) != by_last_message:
            raise bad_request(
                "The $skiptoken belongs to a different $orderby; follow @odata.nextLink as given."
            )
        cursor = (int(data["key"]), str(data["id"]))
    return ChatsQuery(top, frozenset(expand), chat_type, cursor, by_last_message)


# --- GET /me/messages, /me/mailFolders/{folder}/messages ---

MAIL_FILTER_OPS = {
    "receivedDateTime": {"eq", "ne", "gt", "ge", "lt", "le"},
    "sentDateTime": {"eq", "ne", "gt", "ge", "lt", "le"},
    "isRead": {"eq", "ne"},
    "hasAttachments": {"eq", "ne"},
    "subject": {"eq", "ne"},
    "from/emailAddress/address": {"eq", "ne"},
}
MAIL_ORDER_PROPS = ("receivedDateTime", "sentDateTime", "subject")
INEFFICIENT_FILTER = "The restriction or sort order is too complex for this operation."


@dataclass(frozen=True)
class MailQuery:
    top: int
    skip: int
    clauses: tuple[Clause, ...]
    order: tuple[tuple[str, bool], ...]  # (property, descending)
    select: tuple[str, ...] | None


def parse_mail_query(pairs: Iterable[tuple[str, str]]) -> MailQuery:
    options = query_options(pairs, {"$top", "$skip", "$filter", "$orderby", "$select", "$count"})
    top = parse_outlook_top(options.get("$top"), maximum=1000, default=10)
    try:
        skip = int(options.get("$skip", "0"))
        if skip < 0:
            raise ValueError
    except ValueError:
        raise bad_request(
            "The value of $skip must be a non-negative integer.", "ErrorInvalidUrlQuery"
        ) from None
    clauses = tuple(parse_filter(options["$filter"])) if "$filter" in options else ()
    for clause in clauses:
        ops = MAIL_FILTER_OPS.get(clause.prop)
        if ops is None:
            raise bad_request(
                f"Could not find a property named '{clause.prop}' on type "
                "'Microsoft.OutlookServices.Message'.",
                "ErrorInvalidUrlQueryFilter",
            )
        if clause.op not in ops:
            raise bad_request(
                "The query filter contains one or more invalid nodes.", "ErrorInvalidUrlQueryFilter"
            )
        if clause.prop in _DATETIME_PROPS:
            clause.datetime_us()
        elif clause.prop in ("isRead", "hasAttachments"):
            clause.boolean()
        else:
            clause.string()
    order: list[tuple[str, bool]] = []
    if "$orderby" in options:
        for item in options["$orderby"].split(","):
            parts = item.split()
            if (
                not parts
                or len(parts) > 2
                or parts[0] not in MAIL_ORDER_PROPS
                or (len(parts) == 2 and parts[1].lower() not in ("asc", "desc"))
            ):
                raise bad_request(
                    f"Invalid $orderby item '{item.strip()}'; order by one of "
                    f"{', '.join(MAIL_ORDER_PROPS)} [asc|desc].",
                    "ErrorInvalidUrlQuery",
                )
            order.append((parts[0], len(parts) == 2 and parts[1].lower() == "desc"))
    if clauses and order:
        # Exchange can only serve a filtered, sorted query from an index: the $orderby properties must
        # lead the $filter, in the same order.
        filter_props: list[str] = []
        for clause in clauses:
            if clause.prop not in filter_props:
                filter_props.append(clause.prop)
        if filter_props[: len(order)] != [prop for prop, _ in order]:
            raise bad_request(INEFFICIENT_FILTER, "InefficientFilter")
    select = None
    if "$select" in options:
        select = tuple(filter(None, (s.strip() for s in options["$select"].split(","))))
    return MailQuery(top, skip, clauses, tuple(order) or (("receivedDateTime", True),), select)


def _canonical(name: str, choices: tuple[str, ...]) -> str | None:
    """Graph matches property names case-insensitively."""
    return next((c for c in choices if c.lower() == name.lower()), None)
