"""How big each benchmark runs: ``full`` (make bench: ~15 min on 2 cores, plus ~20 min for the change
detection matrix), ``quick`` (one mode of each matrix, under 10 min in all) and ``tiny``
(the test suite's smoke test). Every duration here bounds a loop."""

from __future__ import annotations

from dataclasses import dataclass

from service.config import Settings
from service.workers.chat_scan import ACTIVE_FOR_S

# A bound for the drains and sweeps of the older benchmarks (they once ran at a 5 s poll cadence); not a
# setting: every benchmark runs the replicas on the defaults (bench.replica_defaults describes them).
DEFAULT_CADENCE_S = 5.0
CHAT_MESSAGES_BUDGET_PER_S = 20  # Graph: chat-message requests per second per app per tenant
# An idle window measures a quiet tenant: the scanner stays at its active interval this long after it
# last found a new message, so a window right after a busy one would measure the tail of the traffic.
QUIET_BEFORE_IDLE_S = ACTIVE_FOR_S
# A fleet's first step also waits for every replica to know each watched chat's cursor (one blob read
# per chat per replica at start: 60,000 at 10,000 chats × 6 replicas, minutes on 2 cores); measuring
# during that start would report the start, not the steady fleet.
START_SETTLE_S_PER_1000_CHAT_REPLICAS = 3.0


@dataclass(frozen=True)
class TrafficProfile:
    """A fleet of N replicas, one connected host each, and humans posting at a steady rate."""

    replicas: tuple[int, ...]
    chats: int
    rate_per_s: float
    window_s: float
    drain_max_s: float = 3 * DEFAULT_CADENCE_S + 10


@dataclass(frozen=True)
class LoadProfile:
    """One replica watching N chats: no host, then a connected idle host, then busy traffic."""

    chat_counts: tuple[int, ...]
    no_host_s: float
    steady_s: (
        float  # the idle and busy windows (lengthened to cover a full sweep, see steady_window_s)
    )
    busy_rate_per_s: float
    cold_starts: int  # restarts timed to /readyz after the first start

    def steady_window_s(self, chats: int) -> float:
        """About one full sweep of every chat (a replica gets ~2/3 of the budget answered; its bursts draw
        429s), plus a cadence."""
        sweep = 1.6 * chats / CHAT_MESSAGES_BUDGET_PER_S + DEFAULT_CADENCE_S
        return max(self.steady_s, round(sweep))

    def warmup_max_s(self, chats: int) -> float:
        """Two first cycles (first sight, then the first steady read) for every chat, with margin."""
        return 5 * chats / CHAT_MESSAGES_BUDGET_PER_S + 60


@dataclass(frozen=True)
class ChangeDetectionProfile:
    """The change-detection matrix: mode × chat count × replica count, an idle and a busy window each,
    plus the scanner takeover and the sweep recovery (see bench/change_detection.py)."""

    modes: tuple[str, ...]
    chat_counts: tuple[int, ...]
    replicas: tuple[
        int, ...
    ]  # measured largest first: one fleet per (mode, chats), shrunk step by step
    idle_s: float
    busy_s: float
    busy_rate_per_s: float
    drain_max_s: float  # after the busy window, until every message reached a host
    settle_max_s: (
        float  # before each step's windows: steady polling, the scanner lease on a live replica
    )
    takeover_max_s: float | None  # None: not measured
    sweep_busy_s: float | None  # None: not measured
    sweep_drain_max_s: float = 60.0
    sweep_drop_fraction: float = 0.1
    # One more idle window, at the largest chat count in ordered mode on the first and last steps, one
    # discovery interval long: the 15 s windows fall between or on discovery's walk steps (10 pages
    # every 120 s), this one holds one step, its long-run share. None: not measured.
    long_idle_s: float | None = None
    start_settle_s_per_1000_chat_replicas: float = START_SETTLE_S_PER_1000_CHAT_REPLICAS

    def start_settle_max_s(self, chats: int, replicas: int) -> float:
        return (
            self.settle_max_s + self.start_settle_s_per_1000_chat_replicas * chats * replicas / 1000
        )

    def upper_bound_s(self) -> float:
        """What the matrix takes at most, besides starting the fleets (every wait at its bound)."""
        step = self.settle_max_s + self.idle_s + self.busy_s + self.drain_max_s
        total = len(self.modes) * len(self.chat_counts) * len(self.replicas) * step
        total += len(self.modes) * sum(
            self.start_settle_max_s(c, max(self.replicas)) - self.settle_max_s
            for c in self.chat_counts
        )
        total += (
            len(self.modes) * len(self.chat_counts) * (len(self.replicas) - 1) * QUIET_BEFORE_IDLE_S
        )
        total += 2 * (self.long_idle_s or 0.0)
        total += self.takeover_max_s or 0.0
        total += (self.sweep_busy_s or 0.0) + (self.sweep_drain_max_s if self.sweep_busy_s else 0.0)
        return total


@dataclass(frozen=True)
class ConversationProfile:
    """The conversation mix: per mode one fleet shrunk step by step, a conversation at each step, and
    one more fleet idle at each step (see bench/conversation_mix.py)."""

    modes: tuple[str, ...]
    chats: (
        int  # watched chats (pre-seeded); the conversation itself runs in ``chats_in_play`` of them
    )
    replicas: tuple[int, ...]  # measured largest first, as in the change-detection matrix
    exchanges: int  # a person's message and the agent's reply each
    chats_in_play: int
    react_every: (
        int  # every n-th exchange a person also reacts to the agent's reply of the exchange before
    )
    gap_s: float  # between two changes, so each is found (and read, or not) on its own
    deliver_max_s: float  # the agent answers only what it received: the bound on that wait
    drain_s: (
        float  # quiet after the last change, so the last replica's turn falls inside the window
    )
    settle_max_s: float
    idle_s: float | None  # the idle fleet's window at each step; None: not measured

    def start_settle_max_s(self, replicas: int) -> float:
        return (
            self.settle_max_s + START_SETTLE_S_PER_1000_CHAT_REPLICAS * self.chats * replicas / 1000
        )

    def upper_bound_s(self) -> float:
        """What the run takes at most, besides starting the fleets (every wait at its bound)."""
        exchange = self.deliver_max_s + 2 * self.gap_s + self.gap_s / max(1, self.react_every)
        step = self.settle_max_s + self.exchanges * exchange + self.drain_s
        idle = self.settle_max_s + self.idle_s if self.idle_s is not None else 0.0
        return len(self.replicas) * (len(self.modes) * step + idle)


@dataclass(frozen=True)
class Profile:
    name: str
    traffic: TrafficProfile
    load: LoadProfile
    run_claim_ledger: bool
    change_detection: ChangeDetectionProfile
    conversation: ConversationProfile


PROFILES = {
    "full": Profile(
        "full",
        TrafficProfile(replicas=(1, 2, 3), chats=10, rate_per_s=4.0, window_s=40),
        LoadProfile(
            chat_counts=(100, 1000), no_host_s=20, steady_s=45, busy_rate_per_s=2.0, cold_starts=3
        ),
        run_claim_ledger=True,
        change_detection=ChangeDetectionProfile(
            modes=("ordered", "notifications", "unordered"),
            chat_counts=(1000, 10_000),
            replicas=(6, 3, 1),
            idle_s=15,
            busy_s=20,
            busy_rate_per_s=2.0,
            drain_max_s=15,
            settle_max_s=20,
            takeover_max_s=60,
            sweep_busy_s=20,
            long_idle_s=Settings.model_fields["discovery_interval_s"].default,
        ),
        conversation=ConversationProfile(
            modes=("ordered", "notifications"),
            chats=10_000,
            replicas=(6, 3, 1),
            exchanges=12,
            chats_in_play=4,
            react_every=2,
            gap_s=2.5,
            deliver_max_s=10,
            drain_s=12,
            settle_max_s=20,
            idle_s=Settings.model_fields["discovery_interval_s"].default,
        ),
    ),
    "quick": Profile(
        "quick",
        TrafficProfile(replicas=(1, 2), chats=6, rate_per_s=3.0, window_s=15),
        LoadProfile(
            chat_counts=(100,), no_host_s=10, steady_s=20, busy_rate_per_s=2.0, cold_starts=1
        ),
        run_claim_ledger=False,
        # One mode each (under 10 minutes in all on 2 cores): a smoke run of every benchmark, not the
        # matrix; the conversations take the ordered scan, change detection the notifications, and
        # the Claude Code latency both (``full`` runs every mode).
        change_detection=ChangeDetectionProfile(
            modes=("notifications",),
            chat_counts=(1000,),
            replicas=(3, 1),
            idle_s=8,
            busy_s=10,
            busy_rate_per_s=2.0,
            drain_max_s=12,
            settle_max_s=20,
            takeover_max_s=30,
            sweep_busy_s=10,
            sweep_drain_max_s=30,
        ),
        conversation=ConversationProfile(
            modes=("ordered",),
            chats=1000,
            replicas=(3, 1),
            exchanges=6,
            chats_in_play=3,
            react_every=2,
            gap_s=2.5,
            deliver_max_s=10,
            drain_s=8,
            settle_max_s=20,
            idle_s=15,
        ),
    ),
    "tiny": Profile(
        "tiny",
        TrafficProfile(
            replicas=(1,),
            chats=3,
            rate_per_s=2.0,
            window_s=6,
            drain_max_s=2 * DEFAULT_CADENCE_S + 10,
        ),
        LoadProfile(chat_counts=(5,), no_host_s=3, steady_s=6, busy_rate_per_s=1.0, cold_starts=1),
        run_claim_ledger=False,
        change_detection=ChangeDetectionProfile(
            modes=("ordered",),
            chat_counts=(20,),
            replicas=(1,),
            idle_s=3,
            busy_s=5,
            busy_rate_per_s=1.0,
            drain_max_s=2 * DEFAULT_CADENCE_S + 10,
            settle_max_s=30,
            takeover_max_s=None,
            sweep_busy_s=None,
        ),
        conversation=ConversationProfile(
            modes=("ordered",),
            chats=5,
            replicas=(1,),
            exchanges=2,
            chats_in_play=2,
            react_every=2,
            gap_s=1.5,
            deliver_max_s=10,
            drain_s=2,
            settle_max_s=30,
            idle_s=3,
        ),
    ),
}
