"""The permissions each Teams team, channel and channel-message route takes, delegated and application,
as each route's Graph page lists them ("least privileged" and "higher privileged" together; read, not
run: no tenant). RSC permissions (``*.Group``) are accepted as application permissions: this emulator
grants them tenant-wide, as if consented in every team.

- List joinedTeams: delegated and application Team.ReadBasic.All, TeamSettings.Read.All,
  TeamSettings.ReadWrite.All, User.Read.All, User.ReadWrite.All, Directory.Read.All,
  Directory.ReadWrite.All; "with user delegated permissions, this operation only works for the me
  user"; "me alias is not supported with application permissions".
- Get team: delegated Team.ReadBasic.All (higher TeamSettings.Read(Write).All, Directory.*, Group.*);
  application TeamSettings.Read.Group (higher TeamSettings.ReadWrite.Group, Team.ReadBasic.All, …).
- List channels (and Get channel, List allChannels): delegated Channel.ReadBasic.All (higher
  ChannelSettings.Read(Write).All, Directory.*, Group.*); application ChannelSettings.Read.Group (higher
  Channel.ReadBasic.All, ChannelSettings.*, Directory.*, Group.*).
- List channel messages, Get chatMessage, List replies, chatMessage: delta: delegated
  ChannelMessage.Read.All (higher Group.Read.All, Group.ReadWrite.All); application
  ChannelMessage.Read.Group, ChannelMessage.Read.All, Group.Read.All, Group.ReadWrite.All.
- Send chatMessage in a channel, Reply to a message in a channel: delegated ChannelMessage.Send (higher
  Group.ReadWrite.All); application Teamwork.Migrate.All, "only supported for migration", which this
  emulator does not model: an app-only token is refused as Graph is reported to refuse it, "Requested
  API is not supported in application-only context".
"""

from __future__ import annotations

_DIRECTORY = frozenset({"Directory.Read.All", "Directory.ReadWrite.All"})
_GROUP = frozenset({"Group.Read.All", "Group.ReadWrite.All"})

JOINED_TEAMS = (
    frozenset(
        {
            "Team.ReadBasic.All",
            "TeamSettings.Read.All",
            "TeamSettings.ReadWrite.All",
            "User.Read.All",
            "User.ReadWrite.All",
        }
    )
    | _DIRECTORY
)
TEAM_READ_DELEGATED = (
    frozenset({"Team.ReadBasic.All", "TeamSettings.Read.All", "TeamSettings.ReadWrite.All"})
    | _DIRECTORY
    | _GROUP
)
TEAM_READ_APPLICATION = TEAM_READ_DELEGATED | {
    "TeamSettings.Read.Group",
    "TeamSettings.ReadWrite.Group",
}
_CHANNEL_SETTINGS = frozenset({"ChannelSettings.Read.All", "ChannelSettings.ReadWrite.All"})
CHANNEL_READ_DELEGATED = (
    frozenset({"Channel.ReadBasic.All"}) | _CHANNEL_SETTINGS | _DIRECTORY | _GROUP
)
CHANNEL_READ_APPLICATION = CHANNEL_READ_DELEGATED | {
    "ChannelSettings.Read.Group",
    "ChannelSettings.ReadWrite.Group",
}
MESSAGE_READ_DELEGATED = frozenset({"ChannelMessage.Read.All"}) | _GROUP
MESSAGE_READ_APPLICATION = MESSAGE_READ_DELEGATED | {"ChannelMessage.Read.Group"}
MESSAGE_SEND_DELEGATED = frozenset({"ChannelMessage.Send", "Group.ReadWrite.All"})
APP_ONLY_NOT_SUPPORTED = "Requested API is not supported in application-only context"

# Change notifications ("Get change notifications for messages in Teams channels and chats"):
# /teams/{id}/channels/{id}/messages takes delegated ChannelMessage.Read.All, application
# ChannelMessage.Read.All or ChannelMessage.Read.Group; getAllMessages across channels is application
# ChannelMessage.Read.All only ("Delegated: Not supported").
SUBSCRIBE_CHANNEL_DELEGATED = frozenset({"ChannelMessage.Read.All"})
SUBSCRIBE_CHANNEL_APPLICATION = frozenset({"ChannelMessage.Read.All", "ChannelMessage.Read.Group"})
SUBSCRIBE_TEAM_CHANNELS_APPLICATION = frozenset({"ChannelMessage.Read.All"})
