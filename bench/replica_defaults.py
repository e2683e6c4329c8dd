"""What the benchmarks' replicas run with: the service's own defaults, named in each result."""

from __future__ import annotations

from service.config import Settings


def _default(name: str) -> float:
    return float(Settings.model_fields[name].default)


def replica_defaults() -> dict[str, float]:
    return {
        name: _default(name)
        for name in (
            "chat_poll_interval_s",
            "chat_poll_jitter_s",
            "chat_scan_interval_s",
            "chat_scan_active_interval_s",
            "chat_read_spread_s",
            "chat_sweep_interval_s",
            "discovery_interval_s",
        )
    }


def cadence_line() -> str:
    d = replica_defaults()
    return (
        f"default settings (chat poll every {d['chat_poll_interval_s']} s ± {d['chat_poll_jitter_s']} s, "
        f"the elected scanner every {d['chat_scan_interval_s']} s, every {d['chat_scan_active_interval_s']} s "
        "for 30 s after it found a new message)"
    )
