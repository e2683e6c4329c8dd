"""The teams a tenant starts with, as a seed section (``Seed.teams``), and the Teams throttling budget
(``ThrottleBudget.teams``).

A team has members (user ids or UPNs; owners among them) and channels; every team has its General
channel, as Teams creates one with each team ("Get primaryChannel": "the default channel, General").
A channel is ``standard`` (every team member sees it) or ``private`` (only its own members, who must be
team members: "List channels", read, not run: "Teams members can't see private or shared channels that
they aren't members of"). Shared channels are not modelled.

Figures of ``TeamsThrottleBudget`` from Microsoft's "Microsoft Graph service-specific throttling
limits" page, section "Microsoft Teams service limits" (read, not run: no tenant): "GET channel
message 20 rps", "POST channel message 50 rps", "GET /teams/{team-id}, joinedTeams 30 rps",
"GET /teams/{team-id}/channels 60 rps" (each per app per tenant), and "A maximum of 4 requests per
second per app can be issued on a given team or channel". The page's "3000 messages per app per day
... to a given channel" is not enforced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from emulator.seed import Seed

MembershipType = Literal["standard", "private"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeedChannelMessage(_Model):
    from_user: str  # id or UPN of a team (and, for a private channel, channel) member
    content: str = ""
    content_type: Literal["text", "html"] = "text"
    created: str | None = None  # ISO-8601 or relative ("-2h")
    replies: tuple[SeedChannelMessage, ...] = ()  # one level: replies to replies do not exist


class SeedChannel(_Model):
    id: str | None = None  # generated when absent ("19:…@thread.tacv2")
    display_name: str
    description: str | None = None
    membership_type: MembershipType = "standard"
    members: tuple[
        str, ...
    ] = ()  # a private channel's members (team members); ignored for standard
    messages: tuple[SeedChannelMessage, ...] = ()


class SeedTeam(_Model):
    id: str | None = None  # generated when absent (a GUID: a team is a Microsoft 365 group)
    display_name: str
    description: str | None = None
    members: tuple[str, ...]  # user ids or UPNs
    owners: tuple[str, ...] = ()  # members who are owners
    channels: tuple[
        SeedChannel, ...
    ] = ()  # General is always there; list it to seed messages in it


class TeamsThrottleBudget(_Model):
    channel_message_reads_per_s: int | None = Field(default=20, ge=1)
    channel_message_sends_per_s: int | None = Field(default=50, ge=1)
    team_reads_per_s: int | None = Field(default=30, ge=1)  # GET /teams/{id}, joinedTeams
    channel_lists_per_s: int | None = Field(default=60, ge=1)  # GET /teams/{id}/channels
    per_team_or_channel_per_s: int | None = Field(default=4, ge=1)


def team_seed_problems(seed: Seed) -> list[str]:
    """What is wrong with the seed's teams: unknown users, owners or channel members outside the team."""
    problems: list[str] = []
    for n, team in enumerate(seed.teams):
        label = team.id or team.display_name or f"teams[{n}]"
        members = {u.id for m in team.members if (u := seed.find_user(m)) is not None}
        for ref in (*team.members, *team.owners):
            if seed.find_user(ref) is None:
                problems.append(f"team {label}: {ref!r} is not a user")
        for owner in team.owners:
            user = seed.find_user(owner)
            if user is not None and user.id not in members:
                problems.append(f"team {label}: owner {owner!r} is not a member")
        for channel in team.channels:
            for ref in channel.members:
                user = seed.find_user(ref)
                if user is None or user.id not in members:
                    problems.append(
                        f"team {label}, channel {channel.display_name}: {ref!r} is not a team member"
                    )
            for message in channel.messages:
                for m in (message, *message.replies):
                    user = seed.find_user(m.from_user)
                    if user is None or user.id not in members:
                        problems.append(
                            f"team {label}, channel {channel.display_name}: sender "
                            f"{m.from_user!r} is not a team member"
                        )
                if any(r.replies for r in message.replies):
                    problems.append(
                        f"team {label}, channel {channel.display_name}: replies have no replies"
                    )
    return problems
