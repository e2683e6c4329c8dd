"""Benchmark: team-channel change detection across a fleet (issue 37).

    python -m bench.channel_detection [--quick | --tiny] [--idle-s S] [--busy-s S] [--rate R]
                                      [--results DIR] [--keep-logs]

One fleet on a fresh Azurite and the emulator: 200 channels (10 teams of 20, General among them)
beside 1,000 chats (pre-seeded, see ``ledger_preseed``), every replica on the default settings (the
elected ``channel_watch`` hints ``ENTRABOT_CHANNEL_READS_PER_S`` = 1 channel a second in turn; each
hint is one delta read by one replica). It starts with 3 replicas and one push host per replica, then
is shrunk to 1 (the channel watch's holder kept), and at each step measures:

- idle: nobody posts; the fleet's Graph requests per second, in total and by route group (channel
  delta reads, channel first-sight reads, teams and channels listings, chat messages, chat listings,
  other) and the 429s the emulator answered;
- busy: people @mention the agent in random channels (Poisson, ``--rate`` a second) for ``--busy-s``,
  then a bounded wait until every mention reached a host: detection latency (the message's
  createdDateTime → the push received) p50/p99, and the same Graph figures over posting and wait.

The target: the fleet's channel Graph load flat in the replica count (3 vs 1 replicas ≤ 1.1×), within
Graph's per-app Teams limits (GET channel message 20/s, joinedTeams 30/s, a team's channels 60/s).
With rotation the latency is bounded by one rotation (channels ÷ reads per second), whatever the
replica count: the expected p50 is half a rotation, the p99 about a whole one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from bench.channel_traffic import (
    GraphLoad,
    MentionPoster,
    channel_seed,
    graph_load,
    mention_outcome,
    wait_for_mentions,
)
from bench.fleet_harness import connected_hosts, wait_until_polling
from bench.ledger_preseed import preseed_ledger
from bench.replica_defaults import replica_defaults
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, add_session_arguments, session_from_arguments
from bench.stats import ratio
from emulator.seed import Seed
from service.config import Settings
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import LocalFleet, ReplicaProcess
from service.domain.conversation import TEAM_CHANNELS
from service.ledger.fleet.leases import lease_key, parse_lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from service.workers import channel_watch

NAME = "channel_detection"
FLAT_TARGET = 1.1  # channel Graph load at 3 replicas ÷ at 1
CHANNEL_MESSAGE_GETS_PER_S = 20  # Graph's Teams limit per app per tenant: "GET channel message"
TEAMS_LISTING_PER_S = 30  # "GET /teams/{team-id}, joinedTeams" (a team's channels: 60/s)
POLL_S = 0.25
LEASE_WAIT_S = 90.0


@dataclass(frozen=True)
class ChannelProfile:
    chats: int
    teams: int
    channels_per_team: int
    replicas: tuple[int, ...]  # measured largest first: one fleet, shrunk
    idle_s: float
    busy_s: float
    rate_per_s: float  # mentions a second while busy
    settle_max_s: float
    start_max_s: float  # every channel's first watch and every replica polling

    @property
    def channels(self) -> int:
        return self.teams * self.channels_per_team

    def rotation_s(self) -> float:
        return self.channels / setting_default("channel_reads_per_s")

    def drain_max_s(self) -> float:
        """A mention posted last waits at most one rotation, plus the hint's pick-up and margin."""
        return self.rotation_s() + 30.0


def setting_default(name: str) -> float:
    value: float = Settings.model_fields[name].default
    return value


PROFILES = {
    "full": ChannelProfile(1000, 10, 20, (3, 1), 120.0, 120.0, 0.5, 90.0, 240.0),
    "quick": ChannelProfile(1000, 10, 20, (3, 1), 40.0, 40.0, 0.5, 90.0, 240.0),
    "tiny": ChannelProfile(20, 2, 5, (3, 1), 10.0, 10.0, 0.5, 60.0, 120.0),
}


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


@dataclass
class ChannelFleet:
    fleet: LocalFleet
    backend: BlobBackend  # the bench's own view of the fleet's container

    @property
    def seed(self) -> Seed:
        return self.fleet.seed

    @property
    def alive(self) -> list[ReplicaProcess]:
        return [m for m in self.fleet.members if m.alive]

    async def watch_holder(self) -> str | None:
        read = await read_parsed(self.backend, lease_key(channel_watch.ROLE), parse_lease)
        record = read.value if read.outcome is ReadOutcome.PRESENT else None
        return record.holder if record is not None else None

    async def channel_cursors(self) -> int:
        return len(await self.backend.list(TEAM_CHANNELS.cursor_prefix))

    async def wait_watched(self, channels: int, timeout_s: float) -> float:
        began = time.monotonic()
        while (n := await self.channel_cursors()) < channels:
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"{n} of {channels} channel cursors after {timeout_s:.0f} s")
            await asyncio.sleep(1.0)
        return round(time.monotonic() - began, 2)

    async def wait_live_holder(self, timeout_s: float) -> str | None:
        began = time.monotonic()
        live = {m.name for m in self.alive}
        while time.monotonic() - began < timeout_s:
            if (holder := await self.watch_holder()) in live:
                return holder
            await asyncio.sleep(POLL_S)
        return None

    async def shrink_to(self, count: int) -> list[ReplicaProcess]:
        """SIGTERM the live replicas beyond ``count``, the channel watch's holder kept."""
        holder = await self.watch_holder()
        alive = sorted(self.alive, key=lambda m: m.name != holder)
        await asyncio.gather(*(asyncio.to_thread(m.terminate) for m in alive[count:]))
        return alive[:count]

    def channel_ids(self) -> list[tuple[str, str]]:
        assert self.fleet.emulator is not None
        teams = self.fleet.emulator.state.teams
        agent = self.seed.agent_user.id
        return [(t.id, c.id) for t in teams.teams_of(agent) for c in teams.channels(t.id, agent)]

    def load_since_reset(self, seconds: float) -> GraphLoad:
        assert self.fleet.emulator is not None
        records = self.fleet.emulator.stats.recent()
        return graph_load(records, self.seed.public_client.app_id, seconds)

    def reset_stats(self) -> None:
        assert self.fleet.emulator is not None
        self.fleet.emulator.stats.reset()


async def idle_window(cf: ChannelFleet, seconds: float) -> dict[str, Any]:
    cf.reset_stats()
    began = time.monotonic()
    await asyncio.sleep(seconds)
    return cf.load_since_reset(time.monotonic() - began).as_dict()


async def busy_window(
    cf: ChannelFleet, hosts: Sequence[ChannelHost], profile: ChannelProfile
) -> dict[str, Any]:
    assert cf.fleet.emulator is not None
    agent = cf.seed.agent_user
    poster = MentionPoster(
        cf.fleet.emulator.state.teams,
        cf.channel_ids(),
        [u.id for u in cf.seed.humans],
        agent.id,
        agent.display_name,
        profile.rate_per_s,
        profile.busy_s,
    )
    cf.reset_stats()
    began = time.monotonic()
    await poster.run()
    progress(
        f"  posted {len(poster.posted)} mentions; waiting for them (≤ {profile.drain_max_s():.0f} s)"
    )
    drained = await wait_for_mentions(hosts, poster.posted, profile.drain_max_s())
    graph = cf.load_since_reset(time.monotonic() - began).as_dict()
    return {
        "posting_s": profile.busy_s,
        "drain_s": round(drained, 1),
        "graph": graph,
        "delivery": mention_outcome(hosts, poster.posted),
    }


async def measure_step(
    cf: ChannelFleet,
    members: Sequence[ReplicaProcess],
    http: httpx.AsyncClient,
    profile: ChannelProfile,
) -> dict[str, Any]:
    async with connected_hosts(members) as hosts:
        began = time.monotonic()
        try:
            steady: float | None = round(
                await wait_until_polling(http, members, profile.settle_max_s), 2
            )
        except TimeoutError:
            steady = None
        holder = await cf.wait_live_holder(LEASE_WAIT_S)
        settle = {
            "steady_after_s": steady,
            "channel_watch": holder,
            "settle_s": round(time.monotonic() - began, 2),
        }
        progress(f"  settled {settle}; idle for {profile.idle_s:.0f} s")
        idle = await idle_window(cf, profile.idle_s)
        progress(f"  idle: {_load_line(idle)}")
        progress(f"  busy: {profile.rate_per_s}/s mentions for {profile.busy_s:.0f} s")
        busy = await busy_window(cf, hosts, profile)
        d = busy["delivery"]
        progress(
            f"  busy: {_load_line(busy['graph'])}; {d['delivered']}/{d['posted']} delivered, "
            f"{d['duplicates']} duplicates, p50 {d['latency_s']['p50']} s, p99 {d['latency_s']['p99']} s"
        )
    return {"replicas": len(members), "settle": settle, "idle": idle, "busy": busy}


def _load_line(graph: dict[str, Any]) -> str:
    g = graph["per_s_by_group"]
    return (
        f"{graph['requests_per_s']} req/s (channels {graph['channel_requests_per_s']}: delta "
        f"{g['channel_delta']}, listing {g['teams_listing']}; chat messages {g['chat_messages']}), "
        f"{graph['throttled_429']} 429s"
    )


async def run_profile(session: BenchSession, profile: ChannelProfile) -> dict[str, Any]:
    started_load = load_average()
    seed = channel_seed(profile.chats, profile.teams, profile.channels_per_team)
    azurite = await session.fresh_azurite()
    fleet = LocalFleet(seed, session.scratch(NAME), replicas=max(profile.replicas), azurite=azurite)
    backend = BlobBackend.from_connection_string(
        azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    cf = ChannelFleet(fleet, backend)
    steps: list[dict[str, Any]] = []
    try:
        await asyncio.to_thread(fleet.ensure_container)
        await preseed_ledger(backend, [c.id for c in seed.chats if c.id is not None])
        progress(
            f"starting {max(profile.replicas)} replicas on {profile.chats} chats, "
            f"{profile.channels} channels"
        )
        began = time.monotonic()
        await asyncio.to_thread(fleet.start)
        watched_s = await cf.wait_watched(profile.channels, profile.start_max_s)
        start = {
            "ready_s": round(time.monotonic() - began - watched_s, 2),
            "channels_watched_after_s": watched_s,
        }
        progress(f"fleet up: {start}")
        async with httpx.AsyncClient(timeout=30.0) as http:
            for count in sorted(profile.replicas, reverse=True):
                members = await cf.shrink_to(count)
                progress(f"{count} replica(s): {', '.join(m.name for m in members)}")
                steps.append(await measure_step(cf, members, http, profile))
    finally:
        await asyncio.to_thread(fleet.stop)
        await backend.aclose()
    params = {
        "chats": profile.chats,
        "teams": profile.teams,
        "channels": profile.channels,
        "replicas": list(profile.replicas),
        "idle_s": profile.idle_s,
        "busy_s": profile.busy_s,
        "busy_mentions_per_s": profile.rate_per_s,
        "rotation_s": profile.rotation_s(),
        "drain_max_s": profile.drain_max_s(),
        "replica_settings": {
            **replica_defaults(),
            "channel_reads_per_s": setting_default("channel_reads_per_s"),
            "channel_discovery_interval_s": setting_default("channel_discovery_interval_s"),
        },
        "limits_per_s": {
            "channel_message_gets": CHANNEL_MESSAGE_GETS_PER_S,
            "joined_teams_and_team_gets": TEAMS_LISTING_PER_S,
        },
    }
    return {
        **envelope(NAME, session.profile.name, params, started_load),
        "start": start,
        "steps": steps,
        "flatness": flatness(steps),
    }


def phase_graph(step: dict[str, Any], phase: str) -> dict[str, Any]:
    graph: dict[str, Any] = step["idle"] if phase == "idle" else step["busy"]["graph"]
    return graph


def flatness(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Channel Graph load at the most replicas ÷ at the fewest, idle and busy (target ≤ 1.1)."""
    if len(steps) < 2:
        return {}
    most = max(steps, key=lambda s: s["replicas"])
    fewest = min(steps, key=lambda s: s["replicas"])
    out: dict[str, Any] = {
        "replicas": [most["replicas"], fewest["replicas"]],
        "target": FLAT_TARGET,
    }
    for phase in ("idle", "busy"):
        high, low = phase_graph(most, phase), phase_graph(fewest, phase)
        r = ratio(high["channel_requests_per_s"], low["channel_requests_per_s"])
        out[f"{phase}_channel_load_ratio"] = r
        out[f"{phase}_flat"] = r is not None and r <= FLAT_TARGET
        out[f"{phase}_total_load_ratio"] = ratio(high["requests_per_s"], low["requests_per_s"])
    out["any_429"] = any(
        s["idle"]["throttled_429"] or s["busy"]["graph"]["throttled_429"] for s in steps
    )
    return out


async def run(session: BenchSession) -> dict[str, Any]:
    return await run_profile(session, PROFILES[session.profile.name])


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for s in result["steps"]:
        for phase, graph in (("idle", s["idle"]), ("busy", s["busy"]["graph"])):
            g = graph["per_s_by_group"]
            d = s["busy"]["delivery"] if phase == "busy" else None
            rows.append(
                [
                    s["replicas"],
                    phase,
                    graph["seconds"],
                    graph["requests_per_s"],
                    graph["channel_requests_per_s"],
                    g["channel_delta"],
                    g["channel_messages"],
                    g["teams_listing"],
                    g["chat_messages"],
                    g["chat_listing"],
                    g["other"],
                    graph["throttled_429"],
                    f"{d['delivered']}/{d['posted']}" if d else "–",
                    d["duplicates"] if d else "–",
                    d["latency_s"]["p50"] if d else "–",
                    d["latency_s"]["p99"] if d else "–",
                ]
            )
    table = markdown_table(
        [
            "replicas",
            "phase",
            "window s",
            "Graph req/s",
            "channel req/s",
            "delta",
            "first sight",
            "teams listing",
            "chat msgs",
            "chat listing",
            "other",
            "429s",
            "delivered",
            "dupes",
            "latency p50 s",
            "p99 s",
        ],
        rows,
        align="l" + "l" + "r" * 14,
    )
    p = result["parameters"]
    f = result["flatness"]
    flat = (
        f"Channel Graph load at {f['replicas'][0]} vs {f['replicas'][1]} replicas: idle "
        f"{f['idle_channel_load_ratio']}×, busy {f['busy_channel_load_ratio']}× (target ≤ {f['target']}×); "
        f"all requests idle {f['idle_total_load_ratio']}×, busy {f['busy_total_load_ratio']}×; "
        f"429s: {'yes' if f['any_429'] else 'none'}."
        if f
        else ""
    )
    return (
        f"## Channel detection ({p['channels']} channels in {p['teams']} teams beside {p['chats']} chats, "
        f"default settings: one channel delta read a second, a rotation every {p['rotation_s']:.0f} s)\n\n"
        "Requests per second are the fleet's, every attempt counted (429s included), from the emulator's "
        "records; *channel req/s* = delta + first sight + teams listing, against Graph's per-app limits "
        f"(GET channel message {p['limits_per_s']['channel_message_gets']}/s, joinedTeams and team "
        f"{p['limits_per_s']['joined_teams_and_team_gets']}/s). Busy: {p['busy_mentions_per_s']} @mentions "
        f"of the agent a second in random channels for {p['busy_s']:.0f} s, then until delivered; its "
        "window covers posting and the wait. Latency: the message's createdDateTime → the push at a host.\n\n"
        f"{table}\n\n{flat}\n\n{machine_line(result)}\n"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog=f"python -m bench.{NAME}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_arguments(parser)
    parser.add_argument("--idle-s", type=float, help="the idle window (seconds)")
    parser.add_argument("--busy-s", type=float, help="the busy window's posting (seconds)")
    parser.add_argument("--rate", type=float, help="mentions a second while busy")
    args = parser.parse_args(argv)
    with session_from_arguments(args) as session:
        profile = PROFILES[session.profile.name]
        profile = replace(
            profile,
            idle_s=args.idle_s or profile.idle_s,
            busy_s=args.busy_s or profile.busy_s,
            rate_per_s=args.rate or profile.rate_per_s,
        )
        if session.keep_workdir:
            print(f"replica logs and data in {session.workdir}", flush=True)
        result: dict[str, Any] = asyncio.run(run_profile(session, profile))
        text = markdown(result)
        session.write(NAME, result, text)
        print(text)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
