"""Change notifications for channel messages: the two resources, who may subscribe to them, which
changes each covers, and how a notification names the message. ``emulator.subscriptions`` and the
subscription engine call these; lifetimes, quotas, delivery and lifecycle events are theirs, shared
with chat messages (a channel message is a Teams chatMessage: 4,320 minutes at most, beyond one hour
only with a lifecycleNotificationUrl; one subscription per app and channel).

Read, not run ("Get change notifications for messages in Teams channels and chats"):
- ``/teams/{id}/channels/{id}/messages`` tracks "messages and replies in a channel"; delegated
  ChannelMessage.Read.All, application ChannelMessage.Read.All or ChannelMessage.Read.Group (RSC).
- Across channels, the page names ``/teams/getAllMessages`` (tenant-wide; application
  ChannelMessage.Read.All only, "Delegated: Not supported"); "channel: getAllMessages" documents GET
  ``/teams/{team-id}/channels/getAllMessages`` with the same permission. The per-team resource
  ``/teams/{id}/channels/getAllMessages`` is modelled here with that permission, application only; a
  delegated token (the fleet's agent user) is refused, so the fleet subscribes per channel.
- How a notification names a reply is not shown on the pages read: it is written
  ``teams('{team}')/channels('{channel}')/messages('{root}')/replies('{reply}')``, a root
  ``teams('{team}')/channels('{channel}')/messages('{id}')``, following the chat form
  ``chats('{chat}')/messages('{id}')`` this emulator already sends.
"""

from __future__ import annotations

import re
from typing import Any

from emulator.changes import ChannelMessageChange
from emulator.team_permissions import (
    SUBSCRIBE_CHANNEL_APPLICATION,
    SUBSCRIBE_CHANNEL_DELEGATED,
    SUBSCRIBE_TEAM_CHANNELS_APPLICATION,
)
from emulator.team_state import TeamState

CHANNEL = "channel"  # one channel's messages and replies
TEAM_CHANNELS = "teamChannels"  # every channel of one team
_SEGMENT = r"(?:/(?P<{0}>[^/()']+)|\('(?P<{0}_q>[^']+)'\))"
_CHANNEL_MESSAGES = re.compile(
    r"^/?teams" + _SEGMENT.format("team") + "/channels" + _SEGMENT.format("channel") + "/messages$",
    re.IGNORECASE,
)
_TEAM_CHANNELS = re.compile(
    r"^/?teams" + _SEGMENT.format("team") + "/channels/getAllMessages$", re.IGNORECASE
)


def parse_channel_resource(path: str) -> tuple[str, str] | None:
    """(kind, raw target) for a channel-message resource: "team/channel" or "team"; else None."""
    match = _CHANNEL_MESSAGES.match(path)
    if match:
        team = match.group("team") or match.group("team_q")
        return CHANNEL, f"{team}/{match.group('channel') or match.group('channel_q')}"
    match = _TEAM_CHANNELS.match(path)
    if match:
        return TEAM_CHANNELS, match.group("team") or match.group("team_q")
    return None


def wanted_permissions(kind: str, *, delegated: bool) -> frozenset[str]:
    """The permissions one of which the token must hold; empty when its type is not supported."""
    if kind == CHANNEL:
        return SUBSCRIBE_CHANNEL_DELEGATED if delegated else SUBSCRIBE_CHANNEL_APPLICATION
    return frozenset() if delegated else SUBSCRIBE_TEAM_CHANNELS_APPLICATION


def resolve_target(teams: TeamState, kind: str, raw: str, user_id: str | None) -> str:
    """The target, after checking the caller may read it (404 for no such team or channel, 403 for
    a non-member)."""
    if kind == CHANNEL:
        team_id, _, channel_id = raw.partition("/")
        teams.channel(team_id, channel_id, user_id)
    else:
        teams.team(raw, user_id)
    return raw


def covers(kind: str, target: str, change: ChannelMessageChange) -> bool:
    if kind == CHANNEL:
        return target == f"{change.team_id}/{change.channel_id}"
    return kind == TEAM_CHANNELS and target == change.team_id


def notification_resource(change: ChannelMessageChange) -> tuple[str, dict[str, Any]]:
    """(the notification's resource, its resourceData)."""
    resource = f"teams('{change.team_id}')/channels('{change.channel_id}')/messages"
    if change.reply_to_id is not None:
        resource += f"('{change.reply_to_id}')/replies"
    resource += f"('{change.message_id}')"
    return resource, {
        "id": change.message_id,
        "@odata.type": "#Microsoft.Graph.chatMessage",
        "@odata.id": resource,
    }
