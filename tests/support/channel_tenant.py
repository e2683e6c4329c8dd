"""A tenant with a Teams team for channel tests, and a person's @mention of the agent in a channel, as
the emulator's state takes them (the replicas read them over HTTP)."""

from __future__ import annotations

from typing import Any

from emulator.seed import Seed, SeedUser
from emulator.state import Mention
from emulator.team_state import ChannelMessage, TeamState


def with_team(base: Seed, team_id: str, name: str, channels: list[dict[str, Any]]) -> Seed:
    """``base`` with one team of its first two people and the agent user (seed shape of
    emulator.team_seed: each channel a display_name and its messages, each message its replies)."""
    ada, grace = base.humans[0], base.humans[1]
    data = base.model_dump()
    data["teams"] = [
        {
            "id": team_id,
            "display_name": name,
            "members": [ada.id, grace.id, base.agent_user.id],
            "channels": channels,
        }
    ]
    return Seed.model_validate(data)


def post_mention(
    teams: TeamState,
    team_id: str,
    channel_id: str,
    *,
    sender_id: str,
    agent: SeedUser,
    text: str,
    subject: str | None = None,
) -> ChannelMessage:
    """A root message that @mentions the agent before ``text``, as Teams writes one."""
    name = agent.display_name or agent.id
    return teams.post(
        team_id,
        channel_id,
        sender_id=sender_id,
        content=f'<at id="0">{name}</at> {text}',
        content_type="html",
        mentions=[Mention(0, name, agent.id, name)],
        subject=subject,
    )
