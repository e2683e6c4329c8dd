"""Where a team channel's message was written: the team, the channel and the thread, by id and name.

A channel is one conversation to the ledger (its cursor, its claims, the hub's MessageKey), named by
``channel_conversation_id``: Graph's team id (a GUID) and channel id (``19:…@thread.tacv2``) joined by
a ``/``, which neither contains (Graph's "team" and "channel" resource pages; read, not run here), so
the pair splits back unambiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

_SEPARATOR = "/"


def channel_conversation_id(team_id: str, channel_id: str) -> str:
    if not team_id or not channel_id or _SEPARATOR in team_id or _SEPARATOR in channel_id:
        raise ValueError(
            f"a team id and a channel id without '{_SEPARATOR}' are needed, "
            f"got {team_id!r} and {channel_id!r}"
        )
    return f"{team_id}{_SEPARATOR}{channel_id}"


def split_channel_conversation(conversation_id: str) -> tuple[str, str]:
    """(team id, channel id) of a channel conversation id; ValueError for anything else."""
    team_id, separator, channel_id = conversation_id.partition(_SEPARATOR)
    if not separator or not team_id or not channel_id or _SEPARATOR in channel_id:
        raise ValueError(
            f"{conversation_id!r} is not a channel conversation id (<team id>/<channel id>)"
        )
    return team_id, channel_id


@dataclass(frozen=True, slots=True)
class ChannelPlace:
    team_id: str
    channel_id: str
    thread_id: str  # the root message's id: the root itself, or the root a reply answers
    team_name: str | None = None
    channel_name: str | None = None
    thread_subject: str | None = None  # the root's subject, when its author gave one
