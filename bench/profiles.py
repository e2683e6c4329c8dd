"""How big each benchmark runs: ``full`` (make bench, ≤ ~15 min on 2 cores), ``quick`` (a smoke run of
≤ ~3 min) and ``tiny`` (the test suite's smoke test). Every duration here bounds a loop."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CADENCE_S = 5.0  # ENTRABOT_CHAT_POLL_INTERVAL_S's default: what users run
CHAT_MESSAGES_BUDGET_PER_S = 20  # Graph: chat-message requests per second per app per tenant


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
    steady_s: float  # the idle and busy windows (lengthened to cover a full sweep, see steady_window_s)
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
class Profile:
    name: str
    traffic: TrafficProfile
    load: LoadProfile
    run_claim_ledger: bool


PROFILES = {
    "full": Profile(
        "full",
        TrafficProfile(replicas=(1, 2, 3), chats=10, rate_per_s=4.0, window_s=40),
        LoadProfile(chat_counts=(100, 1000), no_host_s=20, steady_s=45, busy_rate_per_s=2.0, cold_starts=3),
        run_claim_ledger=True,
    ),
    "quick": Profile(
        "quick",
        TrafficProfile(replicas=(1, 2), chats=6, rate_per_s=3.0, window_s=15),
        LoadProfile(chat_counts=(100,), no_host_s=10, steady_s=20, busy_rate_per_s=2.0, cold_starts=1),
        run_claim_ledger=False,
    ),
    "tiny": Profile(
        "tiny",
        TrafficProfile(replicas=(1,), chats=3, rate_per_s=2.0, window_s=6, drain_max_s=2 * DEFAULT_CADENCE_S + 10),
        LoadProfile(chat_counts=(5,), no_host_s=3, steady_s=6, busy_rate_per_s=1.0, cold_starts=1),
        run_claim_ledger=False,
    ),
}
