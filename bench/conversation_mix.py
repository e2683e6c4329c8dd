"""Benchmark: the conversation mix — Graph chat reads per change for the fleet at 6, 3 and 1 replicas,
and what an idle fleet costs Graph (issue 23 item 8).

    python -m bench.conversation_mix [--quick | --tiny] [--results DIR] [--keep-logs]

The change-detection matrix (bench/change_detection.py) posts only people's messages. A real chat is
a conversation: each person's message is answered by the agent, and people react to what was said.
Every one of those changes moves the chat in Graph, and each replica with a host learns of it (a scan
hint, or a change notification); only a person's message is delivered. The target: the fleet's chat
reads per change within 10 % of one replica's at 3 and 6 replicas, i.e. the agent's own reply read
by one replica for the fleet, and a reaction read by none.

Per mode (``ordered``: the scan; ``notifications``: Graph's change notifications, 1 s emulated latency)
one fleet is started on a pre-seeded container and shrunk 6 → 3 → 1 (``change_detection_fleet``); one
host per replica. First, one more fleet (ordered mode) measures the fleet at rest at each step: one
window of ``idle_s`` (full profile: one discovery interval, 120 s) in which nobody posts, the fleet's
Graph requests/s by route. The fleet reads the agent identity's sponsors once per sponsor refresh
interval (120 s): one replica reads Graph, the others take its list from ``fleet/sponsors.json`` (until
ch-fix every replica read them, the one idle cost that grew with the replica count). Each fleet
runs on its own Azurite for less than Azurite's 10-minute garbage sweep (which held every request for
30-50 s once a fleet outlived it; each row says how old its Azurite was). Each conversation step:

- settle (as the change-detection matrix's: steady polling, the scanner lease on a live replica);
- conversation: ``exchanges`` times, in turn over ``chats_in_play`` chats: a person posts (through
  Graph, with the person's own token); once a host received it the agent replies, posted as the agent
  user through the emulator's admin API (the benchmark's own request costs the fleet nothing);
  every ``react_every``-th exchange, the person of the exchange before then reacts to the agent's
  reply there (an earlier message, often of another chat). ``gap_s`` between changes, ``drain_s`` of quiet at the end (the last replica's turn is 5 ×
  1.6 s after the first's at 6 replicas). Counted at the emulator: every fleet GET of a chat's
  messages in the window, each put down to the latest change of its chat before it
  (``conversation_stats.attribute``); reads per change, and their ratio to the 1-replica step.

Expected duration on 2 cores (full): ≈ 22 min (three fleets of 10,000 chats, pre-seeding 25–50 s and
starting ~35 s each; the idle fleet 3 × 120 s, the conversation fleets 3 × ~85 s). ``--quick``: 1,000
chats, 3 and 1 replicas, ≈ 6 min.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.change_detection_fleet import ModeFleet, measure_window, mode_fleet, settle
from bench.change_detection_stats import route_rates, top_routes
from bench.conversation_stats import (
    Change,
    ChangeKind,
    attribute,
    chat_reads,
    growth_to_one_replica,
    per_kind,
    reads_per_change,
)
from bench.fleet_harness import (
    connected_hosts,
    delivery_outcome,
    human_members,
    human_traffic,
    idle_for,
    wait_for_deliveries,
)
from bench.profiles import ConversationProfile
from bench.replica_defaults import replica_defaults
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from service.devstack.channel_host import ChannelHost
from service.devstack.traffic import Posted

NAME = "conversation_mix"
IDLE = "idle"
CONVERSATION = "conversation"
SPONSORS_ROUTE_PART = "/sponsors"


@dataclass
class ConversationWork:
    """The mix, as a measured window's work; returns the window's length in seconds."""

    mf: ModeFleet
    hosts: Sequence[ChannelHost]
    http: httpx.AsyncClient
    profile: ConversationProfile
    changes: list[Change] = field(default_factory=list)
    asked: list[Posted] = field(default_factory=list)
    began: float = 0.0
    ended: float = 0.0

    async def __call__(self) -> float:
        p, seed = self.profile, self.mf.seed
        traffic = human_traffic(self.mf.fleet, self.http)
        chats = human_members(seed)[: max(1, p.chats_in_play)]
        previous: tuple[str, str, str] | None = (
            None  # the exchange before: its chat, reply and person
        )
        self.began = time.monotonic()
        for n in range(p.exchanges):
            chat_id, humans = chats[n % len(chats)]
            person = seed.find_user(humans[(n // len(chats)) % len(humans)])
            assert person is not None
            asked = await traffic.post_chat(person, chat_id, f"conversation message {n}")
            self.asked.append(asked)
            self._changed(ChangeKind.PERSON, chat_id, asked.message_id)
            await wait_for_deliveries(self.hosts, [asked], p.deliver_max_s)
            await asyncio.sleep(p.gap_s)
            reply = await self.mf.emulator_admin(
                self.http,
                "POST",
                f"/chats/{chat_id}/messages",
                {"from_user": seed.agent_user.id, "content": f"the agent's answer to message {n}"},
            )
            self._changed(ChangeKind.AGENT, chat_id, reply["id"])
            await asyncio.sleep(p.gap_s)
            if p.react_every and n % p.react_every == p.react_every - 1 and previous is not None:
                earlier_chat, earlier_reply, reacting = previous
                await self.mf.emulator_admin(
                    self.http,
                    "POST",
                    f"/chats/{earlier_chat}/messages/{earlier_reply}/reactions",
                    {"user": reacting, "reaction_type": "like"},
                )
                self._changed(ChangeKind.REACTION, earlier_chat, earlier_reply)
                await asyncio.sleep(p.gap_s)
            previous = (chat_id, reply["id"], person.id)
        await asyncio.sleep(p.drain_s)
        self.ended = time.monotonic()
        return self.ended - self.began

    def _changed(self, kind: ChangeKind, chat_id: str, message_id: str) -> None:
        self.changes.append(Change(kind, chat_id, message_id, time.monotonic()))

    def outcome(self) -> dict[str, Any]:
        """Reads per change from the emulator's records of the window, and what reached the hosts."""
        assert self.mf.fleet.emulator is not None
        reads = chat_reads(
            self.mf.fleet.emulator.stats.recent(),
            since=self.began,
            until=self.ended,
            humans_app=self.mf.seed.public_client.app_id,
        )
        changes = per_kind(self.changes)
        total = len(self.changes)
        agent_ids = {c.message_id for c in self.changes if c.kind is ChangeKind.AGENT}
        return {
            "changes": changes,
            "changes_total": total,
            "chat_reads": len(reads),
            "chat_reads_429": sum(1 for r in reads if r.status == 429),
            "reads_by_change": attribute(self.changes, reads),
            "reads_per_change": reads_per_change(len(reads), total),
            "reads_per_message": reads_per_change(len(reads), changes["person"] + changes["agent"]),
            "delivery": delivery_outcome(self.hosts, self.asked).as_dict(),
            "agent_replies_pushed": sum(
                1 for h in self.hosts for push in h.pushes if push.message_id in agent_ids
            ),
        }


def _window_fields(window_seconds: float, graph: dict[str, Any]) -> dict[str, Any]:
    by_route = graph["by_route"]
    rates = route_rates(by_route, window_seconds)
    return {
        "seconds": window_seconds,
        "graph_req_per_s": round(graph["requests"] / window_seconds, 3) if window_seconds else 0.0,
        "req_per_s_by_route": rates,
        "by_route": by_route,
        "throttled_429": graph["throttled_429"],
        "sponsor_reads_per_s": round(
            sum(v for k, v in rates.items() if SPONSORS_ROUTE_PART in k), 4
        ),
    }


IDLE_MODE = "ordered"  # the idle fleet: the scan (the notifications mode's idle rate depends on when one came)


async def idle_step(
    mf: ModeFleet,
    n: int,
    http: httpx.AsyncClient,
    p: ConversationProfile,
    *,
    first: bool,
    azurite_started: float,
) -> dict[str, Any]:
    """One replica count of the idle fleet: settle, then one window with nobody posting."""
    assert p.idle_s is not None
    members = await mf.shrink_to(n)
    async with connected_hosts(members):
        settled = await settle(
            mf, members, http, p.start_settle_max_s(n) if first else p.settle_max_s
        )
        began = time.monotonic()
        idle = await measure_window(mf, members, http, idle_for(p.idle_s))
    return {
        "mode": mf.mode,
        "chats": mf.chats,
        "replicas": n,
        "replicas_live": len(members),
        "settle": settled,
        "window": IDLE,
        "azurite_age_s": round(began - azurite_started, 1),
        **_window_fields(idle.seconds, idle.graph),
        "replica_graph_requests": {
            rid: int(d.value("entrabot_graph_requests_total"))
            for rid, d in idle.replica_deltas.items()
        },
    }


async def conversation_step(
    mf: ModeFleet,
    n: int,
    http: httpx.AsyncClient,
    p: ConversationProfile,
    *,
    first: bool,
    azurite_started: float,
) -> dict[str, Any]:
    """One replica count of a conversation fleet: settle, then the conversation."""
    members = await mf.shrink_to(n)
    async with connected_hosts(members) as hosts:
        settled = await settle(
            mf, members, http, p.start_settle_max_s(n) if first else p.settle_max_s
        )
        began = time.monotonic()
        work = ConversationWork(mf, hosts, http, p)
        talk = await measure_window(mf, members, http, work)
    return {
        "mode": mf.mode,
        "chats": mf.chats,
        "replicas": n,
        "replicas_live": len(members),
        "settle": settled,
        "window": CONVERSATION,
        "azurite_age_s": round(began - azurite_started, 1),
        **_window_fields(talk.seconds, talk.graph),
        **work.outcome(),
    }


async def run(session: BenchSession) -> dict[str, Any]:
    p = session.profile.conversation
    started_load = load_average()
    steps = sorted(set(p.replicas), reverse=True)
    rows: list[dict[str, Any]] = []
    fleets: list[dict[str, Any]] = []
    print(
        f"{NAME}: {len(p.modes)} mode(s) × {len(steps)} replica count(s) at {p.chats:,} chats; waits bounded "
        f"at {p.upper_bound_s() / 60:.0f} min plus fleet starts",
        flush=True,
    )
    # Each fleet on its own Azurite, and each shorter than Azurite's 10-minute blob garbage sweep, which
    # holds every request for 30-50 s after a large container (see BenchSession.fresh_azurite): the
    # idle windows get a fleet of their own for that reason.
    plan = [(IDLE_MODE, idle_step)] if p.idle_s is not None else []
    plan += [(mode, conversation_step) for mode in p.modes]
    for mode, step in plan:
        azurite_started = time.monotonic()
        async with (
            mode_fleet(session, mode, p.chats, steps[0]) as mf,
            httpx.AsyncClient(timeout=30) as http,
        ):
            fleets.append(
                {
                    "mode": mode,
                    "windows": IDLE if step is idle_step else CONVERSATION,
                    "chats": p.chats,
                    "replicas": steps[0],
                    "preseed_s": mf.preseeded.seconds,
                    "cursors_written": mf.preseeded.cursors_written,
                    "start_s": mf.start_s,
                }
            )
            for n in steps:
                print(
                    f"{NAME}: {mode}, {n} replica(s), {'idle' if step is idle_step else 'conversation'}",
                    flush=True,
                )
                rows.append(
                    await step(mf, n, http, p, first=n == steps[0], azurite_started=azurite_started)
                )
    for window in (IDLE, CONVERSATION):
        value = "reads_per_change" if window == CONVERSATION else "graph_req_per_s"
        mine = [r for r in rows if r["window"] == window]
        growth = growth_to_one_replica(mine, value)
        for r in mine:
            r["vs_1_replica"] = growth[(r["mode"], r["replicas"])]
    params = {
        "modes": list(p.modes),
        "chats": p.chats,
        "replicas": steps,
        "exchanges": p.exchanges,
        "chats_in_play": p.chats_in_play,
        "react_every": p.react_every,
        "gap_s": p.gap_s,
        "deliver_max_s": p.deliver_max_s,
        "drain_s": p.drain_s,
        "settle_max_s": p.settle_max_s,
        "idle_s": p.idle_s,
        "idle_mode": IDLE_MODE,
        "replica_settings": "defaults (no ENTRABOT_* interval overridden)",
        "replica_defaults": replica_defaults(),
    }
    return {
        **envelope(NAME, session.profile.name, params, started_load),
        "fleets": fleets,
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    talk = [r for r in result["rows"] if r["window"] == CONVERSATION]
    idle = [r for r in result["rows"] if r["window"] == IDLE]
    table = markdown_table(
        [
            "mode",
            "replicas",
            "changes (person / agent / reaction)",
            "chat reads",
            "reads per change",
            "vs 1 replica",
            "reads for person / agent / reaction",
            "delivered",
            "duplicates",
            "agent replies pushed",
            "429s",
        ],
        [
            [
                r["mode"],
                r["replicas"],
                "{person} / {agent} / {reaction}".format(**r["changes"]),
                r["chat_reads"],
                r["reads_per_change"],
                r["vs_1_replica"],
                "{person} / {agent} / {reaction}".format(**r["reads_by_change"]),
                f"{r['delivery']['delivered']}/{r['delivery']['posted']}",
                r["delivery"]["duplicates"],
                r["agent_replies_pushed"],
                r["throttled_429"],
            ]
            for r in talk
        ],
        align="lrlrrrlrrrr",
    )
    out = (
        "## Conversation mix (Graph chat reads per change: a person's message, the agent's reply, a reaction)\n\n"
        f"{result['parameters']['chats']:,} watched chats, {result['parameters']['exchanges']} exchanges over "
        f"{result['parameters']['chats_in_play']} of them, a reaction every {result['parameters']['react_every']}; "
        "one host per replica; every fleet GET of a chat's messages counted at the emulator, 429s included, each "
        "put down to the latest change of its chat before it. Target: within 10 % of 1 replica.\n\n"
        f"{table}\n"
    )
    if idle:
        idle_table = markdown_table(
            [
                "mode",
                "replicas",
                "window s",
                "Graph req/s",
                "vs 1 replica",
                "of it, sponsor reads/s",
                "429s",
                "top routes (req/s)",
            ],
            [
                [
                    r["mode"],
                    r["replicas"],
                    r["seconds"],
                    r["graph_req_per_s"],
                    r["vs_1_replica"],
                    r["sponsor_reads_per_s"],
                    r["throttled_429"],
                    top_routes(r, 4),
                ]
                for r in idle
            ],
            align="lrrrrrrl",
        )
        out += f"\n### The fleet at rest (a fleet of its own: nobody posts)\n\n{idle_table}\n"
    return out + f"\n{machine_line(result)}\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, __doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
