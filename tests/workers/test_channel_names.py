"""A replica's team and channel names (service.workers.channel_names): a channel added after the team's
channels were listed is named once it has a message to read, without a listing per message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from service.graph.client import GraphClient
from service.graph.team_models import Channel, Team
from service.workers.channel_names import ChannelNames


@dataclass
class FakeChannels:
    channels: dict[str, str] = field(default_factory=lambda: {"19:ops@thread.tacv2": "Ops"})
    listings: int = 0

    async def joined_teams(self) -> list[Team]:
        return [Team(id="team", display_name="Engineering")]

    async def list_channels(self, team_id: str) -> list[Channel]:
        self.listings += 1
        return [Channel(id=c, display_name=n) for c, n in self.channels.items()]


async def test_a_channel_added_later_is_named_on_its_first_message_and_listings_are_spaced() -> (
    None
):
    fake = FakeChannels()
    now = [0.0]
    names = ChannelNames(
        cast(GraphClient, cast(Any, type("G", (), {"channels": fake})())), monotonic=lambda: now[0]
    )
    await names.ensure("team", "19:ops@thread.tacv2")
    assert names.names("team", "19:ops@thread.tacv2") == ("Engineering", "Ops")
    fake.channels["19:later@thread.tacv2"] = "Later"
    now[0] = 0.5
    await names.ensure("team", "19:later@thread.tacv2")  # listed half a second ago: not yet
    assert names.names("team", "19:later@thread.tacv2") == ("Engineering", None)
    now[0] = 3.0
    await names.ensure("team", "19:later@thread.tacv2")
    assert names.names("team", "19:later@thread.tacv2") == ("Engineering", "Later")
    await names.ensure("team", "19:later@thread.tacv2")  # known: never listed again for it
    assert fake.listings == 2
