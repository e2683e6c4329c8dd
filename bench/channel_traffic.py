"""The pieces of the channel benchmark that are not a fleet: a tenant of teams beside chats, people
@mentioning the agent in random channels, what the fleet's Graph requests were for, and how long a
mention took to reach a host."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bench.stats import summarize
from emulator.seed import Seed, build_seed
from emulator.state import Mention
from emulator.stats import RECENT_LIMIT, RequestRecord
from emulator.team_state import TeamState
from service.devstack.channel_host import ChannelHost
from service.domain.channel_place import channel_conversation_id

GENERAL = "General"  # every team has it (emulator.team_seed); the others are named here


def channel_seed(chats: int, teams: int, channels_per_team: int) -> Seed:
    """``chats`` chats and ``teams`` teams of ``channels_per_team`` channels each (General among them),
    every human and the agent a member of every team, no channel history."""
    base = build_seed(chats=chats, humans=4)
    members = [u.id for u in base.humans] + [base.agent_user.id]
    data = base.model_dump()
    data["teams"] = [
        {
            "display_name": f"Team {t + 1:02d}",
            "members": members,
            "channels": [
                {"display_name": f"Channel {t + 1:02d}-{c + 1:02d}"}
                for c in range(channels_per_team - 1)
            ],
        }
        for t in range(teams)
    ]
    return Seed.model_validate(data)


class RouteGroup(Enum):
    """What a fleet request to Graph was for, by its route template."""

    CHANNEL_DELTA = "channel_delta"  # the rotation's reads
    CHANNEL_MESSAGES = "channel_messages"  # first sight: list a channel's messages and replies
    TEAMS_LISTING = "teams_listing"  # joinedTeams, a team's channels, a team or channel's name
    CHAT_MESSAGES = "chat_messages"
    CHAT_LISTING = "chat_listing"  # /me/chats, a chat, its members
    OTHER = "other"

    @property
    def is_channel(self) -> bool:
        return self in (
            RouteGroup.CHANNEL_DELTA,
            RouteGroup.CHANNEL_MESSAGES,
            RouteGroup.TEAMS_LISTING,
        )


def route_group(route: str) -> RouteGroup:
    if "/teams/" in route and "/messages" in route:
        return RouteGroup.CHANNEL_DELTA if "/delta" in route else RouteGroup.CHANNEL_MESSAGES
    if "joinedTeams" in route or "/teams" in route:
        return RouteGroup.TEAMS_LISTING
    if "/chats/{id}/messages" in route:
        return RouteGroup.CHAT_MESSAGES
    if "/chats" in route:
        return RouteGroup.CHAT_LISTING
    return RouteGroup.OTHER


@dataclass(frozen=True)
class GraphLoad:
    """The fleet's Graph requests in one window, from the emulator's records (people's posts, made in
    this process or with another app's token, are left out; so is the token endpoint)."""

    seconds: float
    by_group: dict[RouteGroup, int]  # every attempt, 429s included
    by_route: dict[str, dict[str, int]]  # "GET /v1.0/teams/{id}/…" -> {"200": n, "429": m}
    throttled_by_group: dict[RouteGroup, int]
    records_truncated: bool

    @property
    def channel_requests(self) -> int:
        return sum(n for g, n in self.by_group.items() if g.is_channel)

    def per_s(self, count: int) -> float:
        return round(count / self.seconds, 3) if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        total = sum(self.by_group.values())
        return {
            "seconds": round(self.seconds, 1),
            "requests": total,
            "requests_per_s": self.per_s(total),
            "channel_requests_per_s": self.per_s(self.channel_requests),
            "per_s_by_group": {g.value: self.per_s(self.by_group.get(g, 0)) for g in RouteGroup},
            "requests_by_group": {g.value: self.by_group.get(g, 0) for g in RouteGroup},
            "throttled_429": sum(self.throttled_by_group.values()),
            "throttled_429_by_group": {g.value: n for g, n in self.throttled_by_group.items() if n},
            "by_route": self.by_route,
            "records_truncated": self.records_truncated,
        }


def graph_load(records: Sequence[RequestRecord], humans_app: str, seconds: float) -> GraphLoad:
    by_group: Counter[RouteGroup] = Counter()
    throttled: Counter[RouteGroup] = Counter()
    by_route: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        if r.app_id == humans_app or not r.path.startswith("/v1.0"):
            continue
        group = route_group(r.route)
        by_group[group] += 1
        throttled[group] += r.status == 429
        by_route[f"{r.method} {r.route}"][str(r.status)] += 1
    return GraphLoad(
        seconds=seconds,
        by_group=dict(by_group),
        by_route={k: dict(v) for k, v in sorted(by_route.items())},
        throttled_by_group=dict(throttled),
        records_truncated=len(records) >= RECENT_LIMIT,
    )


# --- people mentioning the agent ---


@dataclass(frozen=True)
class PostedMention:
    conversation_id: str  # <team id>/<channel id>, as pushes name it
    message_id: str
    created: float  # the emulator's createdDateTime, epoch seconds


@dataclass
class MentionPoster:
    """People @mentioning the agent in random channels at Poisson times, ``rate_per_s`` on average,
    through the in-process emulator (no Graph request of theirs is counted)."""

    teams: TeamState
    channels: Sequence[tuple[str, str]]  # (team id, channel id)
    humans: Sequence[str]  # user ids
    agent_id: str
    agent_name: str
    rate_per_s: float
    window_s: float
    rng: random.Random = field(default_factory=lambda: random.Random(20270137))
    posted: list[PostedMention] = field(default_factory=list)

    async def run(self) -> float:
        """Post until the window ends; returns its length in seconds."""
        began = time.monotonic()
        due = began
        while True:
            due += self.rng.expovariate(self.rate_per_s)
            if due - began > self.window_s:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.post_one(len(self.posted))
        await asyncio.sleep(max(0.0, began + self.window_s - time.monotonic()))
        return time.monotonic() - began

    def post_one(self, n: int) -> PostedMention:
        team_id, channel_id = self.rng.choice(self.channels)
        message = self.teams.post(
            team_id,
            channel_id,
            sender_id=self.rng.choice(self.humans),
            content=f'<at id="0">{self.agent_name}</at> benchmark question {n}',
            content_type="html",
            mentions=[Mention(0, self.agent_name, self.agent_id, self.agent_name)],
        )
        posted = PostedMention(
            channel_conversation_id(team_id, channel_id), message.id, message.created.timestamp()
        )
        self.posted.append(posted)
        return posted


def delivered_keys(hosts: Sequence[ChannelHost]) -> Counter[tuple[str, str]]:
    """Pushes by (conversation, message): Teams message ids are unique only within a channel."""
    return Counter((p.chat_id, p.message_id) for h in hosts for p in h.pushes)


async def wait_for_mentions(
    hosts: Sequence[ChannelHost], posted: Sequence[PostedMention], timeout_s: float
) -> float:
    """Wait until every mention reached some host (or the timeout); returns the seconds waited."""
    wanted = {(p.conversation_id, p.message_id) for p in posted}
    began = time.monotonic()
    while time.monotonic() - began < timeout_s and not wanted <= set(delivered_keys(hosts)):
        await asyncio.sleep(0.25)
    return time.monotonic() - began


def mention_outcome(
    hosts: Sequence[ChannelHost], posted: Sequence[PostedMention]
) -> dict[str, Any]:
    """Delivered, missing and duplicated mentions, and latency from creation to the first push."""
    wanted = {(p.conversation_id, p.message_id): p for p in posted}
    first: dict[tuple[str, str], float] = {}
    counts: Counter[tuple[str, str]] = Counter()
    for push in (p for h in hosts for p in h.pushes):
        key = (push.chat_id, push.message_id)
        if key in wanted:
            counts[key] += 1
            first[key] = min(first.get(key, push.received_at), push.received_at)
    latencies = [at - wanted[key].created for key, at in first.items()]
    return {
        "posted": len(wanted),
        "delivered": len(first),
        "missing": len(wanted) - len(first),
        "duplicates": sum(n - 1 for n in counts.values()),
        "latency_s": summarize(latencies).as_dict(),
    }
