"""Graph's Teams limits for teams, channels and channel messages, beside the chat ones in
``emulator.throttle`` and counted the same way (a sliding one-second window per app, and per team or
channel where Graph says so).

Read, not run ("Microsoft Graph service-specific throttling limits", "Microsoft Teams service limits",
limit per app per tenant): GET channel message 20 rps; POST channel message 50 rps; GET
/teams/{team-id}, joinedTeams 30 rps; GET /teams/{team-id}/channels 60 rps; "A maximum of 4 requests
per second per app can be issued on a given team or channel". A get of one channel is "GET team,
channel …" (30 rps), counted with the team reads here. Delta, replies and message reads all count as
"GET channel message"; a reply posted counts as "POST channel message".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request

from emulator.team_seed import TeamsThrottleBudget

if TYPE_CHECKING:
    from emulator.throttle import LimitName

TEAMS_KINDS = frozenset({"teams", "team_channels", "channel_messages"})


def teams_limits(budget: TeamsThrottleBudget) -> list[tuple[LimitName, int | None, float, str]]:
    return [
        ("channel_message_reads", budget.channel_message_reads_per_s, 1.0, "app"),
        ("channel_message_sends", budget.channel_message_sends_per_s, 1.0, "app"),
        ("team_reads", budget.team_reads_per_s, 1.0, "app"),
        ("channel_lists", budget.channel_lists_per_s, 1.0, "app"),
        ("per_team_or_channel", budget.per_team_or_channel_per_s, 1.0, "app and team or channel"),
    ]


def teams_charges(kind: str, request: Request) -> list[tuple[LimitName, str]]:
    """The (limit, key) pairs a Teams request is counted under; the team-or-channel key is the channel
    when the path names one."""
    params = request.path_params
    where = params.get("channel_id") or params.get("team_id")
    charges: list[tuple[LimitName, str]] = []
    if kind == "channel_messages":
        charges.append(
            ("channel_message_reads" if request.method == "GET" else "channel_message_sends", "")
        )
    elif kind == "team_channels":
        charges.append(("channel_lists", ""))
    else:
        charges.append(("team_reads", ""))
    if where:
        charges.append(("per_team_or_channel", where))
    return charges
