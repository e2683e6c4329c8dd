"""The names of the agent's teams and channels, for what a channel message says about where it was
written (push meta, inbox items).

Each replica keeps its own: names are not part of any claim, and reading them is a handful of
requests per replica (one ``/me/joinedTeams``, one ``/teams/{id}/channels`` per team), done when a
channel whose name is not known yet has a message to read, and at most once per ``refresh_s`` for a
team or a channel Graph did not name (a known name is never read again). A name that cannot be read leaves the id in its place: a
message is never held back for its channel's name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from service.graph.client import GraphClient
from service.graph.errors import GraphError

log = logging.getLogger(__name__)


@dataclass
class ChannelNames:
    graph: GraphClient
    # How soon a team's channels are listed again for a channel it did not name: a channel added since
    # the last listing has messages to read now (only a read with messages asks).
    refresh_s: float = 2.0
    monotonic: Callable[[], float] = time.monotonic
    _teams: dict[str, str | None] = field(default_factory=dict)
    _channels: dict[tuple[str, str], str | None] = field(default_factory=dict)
    _asked: dict[str, float] = field(default_factory=dict)  # what was read when: "teams", a team id

    def names(self, team_id: str, channel_id: str) -> tuple[str | None, str | None]:
        return self._teams.get(team_id), self._channels.get((team_id, channel_id))

    def learn(self, team_id: str, team_name: str | None, channels: dict[str, str | None]) -> None:
        """Names another part read anyway (the channel watch's discovery walk)."""
        self._teams[team_id] = team_name
        for channel_id, name in channels.items():
            self._channels[(team_id, channel_id)] = name

    async def ensure(self, team_id: str, channel_id: str) -> None:
        """Read the team's and the channel's names unless known or read within ``refresh_s``."""
        if team_id not in self._teams and self._due("teams"):
            try:
                for team in await self.graph.channels.joined_teams():
                    self._teams[team.id] = team.display_name
            except GraphError as exc:
                log.info("team names not read", extra={"error": type(exc).__name__})
        if (team_id, channel_id) not in self._channels and self._due(team_id):
            try:
                for channel in await self.graph.channels.list_channels(team_id):
                    self._channels[(team_id, channel.id)] = channel.display_name
            except GraphError as exc:
                log.info(
                    "channel names not read",
                    extra={"team_id": team_id, "error": type(exc).__name__},
                )

    def _due(self, what: str) -> bool:
        now = self.monotonic()
        last = self._asked.get(what)
        if last is not None and now - last < self.refresh_s:
            return False
        self._asked[what] = now
        return True
