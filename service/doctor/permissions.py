"""Every Graph permission the fleet uses, and which Graph call (or token claim) proves each one.

Derived from the routes ``service/graph/client.py`` calls, in the order the doctor checks them (a
read may use what an earlier one found: a chat, its members). Reads are proven by one harmless read;
writes (sending, creating chats) cannot be tried without a side effect, so they are proven by the
agent user's token carrying one of the accepted scopes in its ``scp`` claim. Accepted scopes are the
ones Graph's permission tables list for the route (least privileged first).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Probe(str, Enum):
    ME = "GET /me"
    USER = "GET /users/{id}"
    CHATS = "GET /me/chats"
    CHAT_MEMBERS = "GET /chats/{id}/members"
    CHAT_MESSAGES = "GET /chats/{id}/messages"
    MAIL = "GET /me/mailFolders/inbox/messages"
    TOKEN_SCOPE = "the token's scp claim"


@dataclass(frozen=True)
class DelegatedPermission:
    name: str  # the permission to grant (least privileged that covers what the fleet does)
    accepted: frozenset[str]  # any of these satisfies the route
    probe: Probe
    why: str


DELEGATED_PERMISSIONS: tuple[DelegatedPermission, ...] = (
    DelegatedPermission(
        "User.Read",
        frozenset({"User.Read", "User.ReadWrite", "User.ReadBasic.All", "User.Read.All"}),
        Probe.ME,
        "who the agent user is (start-up)",
    ),
    DelegatedPermission(
        "Chat.Read",
        frozenset({"Chat.ReadBasic", "Chat.Read", "Chat.ReadWrite"}),
        Probe.CHATS,
        "discovery lists the agent user's chats with their last message",
    ),
    DelegatedPermission(
        "ChatMember.Read",
        frozenset({"ChatMember.Read", "ChatMember.ReadWrite", "Chat.ReadWrite"}),
        Probe.CHAT_MEMBERS,
        "the sponsor gate matches chat members to sponsors",
    ),
    DelegatedPermission(
        "User.ReadBasic.All",
        frozenset({"User.ReadBasic.All", "User.Read.All", "Directory.Read.All"}),
        Probe.USER,
        "names and addresses of people the tools look up",
    ),
    DelegatedPermission(
        "Chat.Read",
        frozenset({"Chat.Read", "Chat.ReadWrite"}),
        Probe.CHAT_MESSAGES,
        "the chat poll reads new messages",
    ),
    DelegatedPermission(
        "Mail.Read",
        frozenset({"Mail.ReadBasic", "Mail.Read", "Mail.ReadWrite"}),
        Probe.MAIL,
        "the email poll reads the inbox",
    ),
    DelegatedPermission(
        "ChatMessage.Send",
        frozenset({"ChatMessage.Send", "Chat.ReadWrite"}),
        Probe.TOKEN_SCOPE,
        "replies in chats",
    ),
    DelegatedPermission(
        "Chat.Create",
        frozenset({"Chat.Create", "Chat.ReadWrite"}),
        Probe.TOKEN_SCOPE,
        "starting a chat with a sponsor",
    ),
    DelegatedPermission(
        "ChatMember.ReadWrite",
        frozenset({"ChatMember.ReadWrite", "Chat.ReadWrite"}),
        Probe.TOKEN_SCOPE,
        "adding a member to a chat",
    ),
    DelegatedPermission("Mail.Send", frozenset({"Mail.Send"}), Probe.TOKEN_SCOPE, "sending mail"),
)

# Application permission of the agent identity itself (Graph: "List agentIdentity sponsors" lists
# AgentIdentity.ReadWrite.All as its least privileged application permission, delegated unsupported).
SPONSOR_READ_PERMISSION = "AgentIdentity.ReadWrite.All"
