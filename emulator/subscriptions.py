"""Subscriptions as Graph keeps them, and the rules a create or a renewal must pass.

Pure rules over plain data: which resources can be watched and by which token type, the lifetimes,
the quotas, and the notification URL. They raise GraphError with the code Graph answers with.

Read, not run (Graph's "Create subscription" permission table): /users/{id}/chats/getAllMessages
takes a delegated token (Chat.Read, Chat.ReadWrite) or an application one (Chat.Read.All,
Chat.ReadWrite.All); /chats/{id}/messages delegated Chat.Read, Chat.ReadWrite or application
Chat.Read.All; an Outlook message resource delegated Mail.ReadBasic, Mail.Read or application
Mail.Read. "chatMessage subscriptions with delegated permissions don't support resource data", and
rich notifications need an encryption certificate this emulator does not model, so
includeResourceData is refused. The error messages below are the ones Graph is reported to answer
with; their codes (ValidationError for the handshake, InvalidRequest for properties, ExtensionError
with 403 for a quota) follow the documented and commonly reported responses.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from emulator import channel_subscriptions
from emulator.errors import GraphError, bad_request, forbidden
from emulator.subscription_policy import SubscriptionPolicy

CHANGE_TYPES = ("created", "updated", "deleted")
CHAT_READ_DELEGATED = frozenset({"Chat.Read", "Chat.ReadWrite"})
CHAT_READ_APPLICATION = frozenset({"Chat.Read.All", "Chat.ReadWrite.All"})
MAIL_READ_DELEGATED = frozenset({"Mail.ReadBasic", "Mail.Read", "Mail.ReadWrite"})
MAIL_READ_APPLICATION = frozenset({"Mail.Read", "Mail.ReadBasic.All", "Mail.ReadWrite"})
MAX_CLIENT_STATE = 128

_USER_CHATS = re.compile(r"^/?(?:users/(?P<user>[^/()]+)|me)/chats/getAllMessages$", re.IGNORECASE)
_CHAT = re.compile(r"^/?chats/(?P<chat>[^/]+)/messages$", re.IGNORECASE)
_CHAT_PAREN = re.compile(r"^/?chats\('(?P<chat>[^']+)'\)/messages$", re.IGNORECASE)
_INBOX = re.compile(
    r"^/?(?:users/(?P<user>[^/()]+)|me)/mailFolders(?:\('inbox'\)|/inbox)/messages$", re.IGNORECASE
)


class Watched(enum.Enum):
    USER_CHATS = "userChats"  # every chat message of one user
    CHAT = "chat"  # one chat's messages
    INBOX = "inbox"  # one mailbox's Inbox
    # Teams channel messages and replies (emulator.channel_subscriptions).
    CHANNEL = channel_subscriptions.CHANNEL  # one channel's; target "team/channel"
    TEAM_CHANNELS = (
        channel_subscriptions.TEAM_CHANNELS
    )  # every channel of one team; target the team

    @property
    def is_chat(self) -> bool:
        return self is not Watched.INBOX


@dataclass(frozen=True)
class ResourceRef:
    kind: Watched
    target: str  # a user id (USER_CHATS, INBOX) or a chat id (CHAT), resolved


@dataclass(frozen=True)
class Subscription:
    id: str
    resource: str  # as the client wrote it
    ref: ResourceRef
    change_types: tuple[str, ...]
    notification_url: str
    lifecycle_url: str | None
    client_state: str | None
    expiration: datetime
    app_id: str
    creator_id: str  # the signed-in user, or the app for an app-only token
    delegated: bool
    token_expiry: datetime  # of the token that created or last reauthorized it
    reauthorization_sent: bool = False

    @property
    def change_type_text(self) -> str:
        return ",".join(self.change_types)

    def reauthorized(self, token_expiry: datetime) -> Subscription:
        return replace(self, token_expiry=token_expiry, reauthorization_sent=False)

    def renewed(
        self, expiration: datetime, notification_url: str, token_expiry: datetime
    ) -> Subscription:
        """A renewal also reauthorizes (Graph's lifecycle notifications page)."""
        return replace(
            self.reauthorized(token_expiry),
            expiration=expiration,
            notification_url=notification_url,
        )

    def challenged(self, deadline: datetime) -> Subscription:
        """reauthorizationRequired was sent; delivery pauses at ``deadline`` unless reauthorized."""
        return replace(
            self, reauthorization_sent=True, token_expiry=min(self.token_expiry, deadline)
        )


def parse_resource(resource: str) -> tuple[Watched, str | None]:
    """The kind of resource and its raw id (None for /me, which the caller resolves)."""
    path = resource.strip().split("?", 1)[0]
    for pattern, kind in ((_USER_CHATS, Watched.USER_CHATS), (_INBOX, Watched.INBOX)):
        match = pattern.match(path)
        if match:
            return kind, match.group("user")
    match = _CHAT.match(path) or _CHAT_PAREN.match(path)
    if match:
        return Watched.CHAT, match.group("chat")
    channel = channel_subscriptions.parse_channel_resource(path)
    if channel is not None:
        return Watched(channel[0]), channel[1]
    raise bad_request(
        f"Resource '{resource}' is not supported for change notifications by this tenant; "
        "subscribe to /users/{id}/chats/getAllMessages, /chats/{id}/messages, "
        "/teams/{id}/channels/{id}/messages, /teams/{id}/channels/getAllMessages or "
        "/users/{id}/mailFolders('Inbox')/messages.",
        "InvalidRequest",
    )


def parse_change_types(value: object, kind: Watched) -> tuple[str, ...]:
    if not isinstance(value, str) or not value.strip():
        raise bad_request(
            "changeType is required: a comma-separated list of created, updated, deleted.",
            "InvalidRequest",
        )
    types = tuple(t.strip() for t in value.split(","))
    unknown = [t for t in types if t not in CHANGE_TYPES]
    if unknown or len(set(types)) != len(types):
        raise bad_request(
            f"Invalid changeType '{value}': use created, updated, deleted, comma-separated, "
            "each once.",
            "InvalidRequest",
        )
    return types


def check_permission(
    kind: Watched, *, delegated: bool, scopes: frozenset[str], roles: frozenset[str]
) -> None:
    if kind in (Watched.CHANNEL, Watched.TEAM_CHANNELS):
        wanted = channel_subscriptions.wanted_permissions(kind.value, delegated=delegated)
        if not wanted:
            raise forbidden(
                "Operation: Create; Exception: [Status Code: Forbidden; Reason: This resource does "
                "not support delegated permissions; subscribe with an application token.]",
                "ExtensionError",
            )
    elif kind.is_chat:
        wanted = (
            CHAT_READ_DELEGATED
            if delegated
            else (
                CHAT_READ_APPLICATION
                if kind is Watched.USER_CHATS
                else frozenset({"Chat.Read.All"})
            )
        )
    else:
        wanted = MAIL_READ_DELEGATED if delegated else MAIL_READ_APPLICATION
    held = scopes if delegated else roles
    if not held & wanted:
        what = "scope" if delegated else "role"
        raise forbidden(
            f"Operation: Create; Exception: [Status Code: Forbidden; Reason: Missing {what} "
            f"permissions on the request. API requires one of '{', '.join(sorted(wanted))}'.]",
            "ExtensionError",
        )


def check_notification_url(
    url: object, policy: SubscriptionPolicy, field: str = "notificationUrl"
) -> str:
    """Graph wants https. The emulator can only ever reach this machine, so it accepts loopback
    addresses alone, over http too when the seed allows it, and refuses every other host."""
    if not isinstance(url, str) or not url:
        raise bad_request(f"{field} is required.", "InvalidRequest")
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise bad_request(f"The {field} '{url}' is not an absolute http(s) URL.", "InvalidRequest")
    if not _is_loopback(host):
        raise bad_request(
            f"The {field} host '{host}' is not a loopback address: this emulator delivers "
            "notifications only to 127.0.0.0/8, ::1 or localhost.",
            "InvalidRequest",
        )
    if parts.scheme == "http" and not policy.allow_loopback_http:
        raise bad_request(f"The {field} must use https.", "InvalidRequest")
    return url


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_client_state(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_CLIENT_STATE:
        raise bad_request(
            f"clientState must be a string of at most {MAX_CLIENT_STATE} characters.",
            "InvalidRequest",
        )
    return value


def check_lifetime(
    kind: Watched,
    expiration: datetime,
    now: datetime,
    *,
    has_lifecycle_url: bool,
    policy: SubscriptionPolicy,
) -> None:
    if expiration <= now:
        raise bad_request("Subscription expiration must be in the future.", "InvalidRequest")
    limit = policy.chat_max_minutes if kind.is_chat else policy.mail_max_minutes
    if expiration - now > timedelta(minutes=limit):
        raise bad_request(
            f"Subscription expiration can only be {limit} minutes in the future.", "InvalidRequest"
        )
    if (
        kind.is_chat
        and not has_lifecycle_url
        and expiration - now > timedelta(minutes=policy.chat_without_lifecycle_max_minutes)
    ):
        raise bad_request(
            "lifecycleNotificationUrl is required for subscription creation on this resource when "
            f"the expirationDateTime value exceeds {_hours(policy.chat_without_lifecycle_max_minutes)}.",
            "InvalidRequest",
        )


def _hours(minutes: int) -> str:
    return "1 hour" if minutes == 60 else f"{minutes} minutes"


def check_quota(
    new: ResourceRef, app_id: str, active: list[Subscription], policy: SubscriptionPolicy
) -> None:
    if new.kind is Watched.INBOX:
        used, limit, what = sum(1 for s in active if s.ref == new), policy.mailbox_quota, "mailbox"
    elif new.kind is Watched.USER_CHATS:
        used, limit, what = (
            sum(1 for s in active if s.ref == new),
            policy.per_user_chat_quota,
            "user",
        )
    else:
        used = sum(1 for s in active if s.ref == new and s.app_id == app_id)
        limit, what = policy.per_app_chat_quota, "app and chat"
    chat_total = sum(1 for s in active if s.ref.kind.is_chat)
    if new.kind.is_chat and chat_total >= policy.organization_chat_quota:
        used, limit, what = chat_total, policy.organization_chat_quota, "organization"
    if used >= limit:
        raise GraphError(
            403,
            "ExtensionError",
            "Operation: Create; Exception: [Status Code: Forbidden; Reason: "
            f"Subscription quota exceeded: at most {limit} active subscriptions per {what} for this "
            "resource.]",
        )
