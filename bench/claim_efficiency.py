"""Benchmark: how the shared claim ledger behaves as replicas are added, measured at the fleet level.

    python -m bench.claim_efficiency [--quick | --tiny] [--results DIR]

Read from the same fleet-traffic runs as the latency benchmark (N replicas, one host each, humans
posting at a steady rate), from the counters each replica exports on /metrics, summed over the
fleet for the posting window and the drain after it:

- CAS attempts per successful claim: conditional writes of chat cursors, i.e. successful claims plus
  the writes that lost a race (``entrabot_cas_conflicts_total{ledger="chat"}``), divided by
  successful claims (``entrabot_claims_total{ledger="chat",outcome="claimed"}``).
- lost claims per successful claim: a replica read a cursor and found a sibling had claimed it all.
- claims/s and claimed messages/s over the run, and messages per successful claim (the batch).
- blob operations per delivered message, by operation.

The ledger's ceiling under full contention, without Graph pacing, is ``bench/claim_ledger.py``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.fleet_traffic import TrafficRun, traffic_run
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from bench.stats import ratio

NAME = "claim_efficiency"
CLAIMS = "entrabot_claims_total"


def claim_row(traffic: TrafficRun) -> dict[str, Any]:
    total = traffic.fleet_total
    outcomes = {
        o: int(total(CLAIMS, ledger="chat", outcome=o))
        for o in ("claimed", "lost", "nothing_new", "unresolved")
    }
    claimed = outcomes["claimed"]
    conflicts = int(total("entrabot_cas_conflicts_total", ledger="chat"))
    messages = int(total("entrabot_claimed_messages_total", ledger="chat"))
    delivered = traffic.delivery.delivered
    blob_ops: dict[str, int] = {}
    for delta in traffic.replica_deltas.values():
        for op, n in delta.by_label("entrabot_blob_operations_total", "op").items():
            blob_ops[op] = blob_ops.get(op, 0) + int(n)
    return {
        "replicas": traffic.replicas,
        "claims_by_outcome": outcomes,
        "cas_conflicts": conflicts,
        "cas_attempts": claimed + conflicts,
        "cas_attempts_per_claim": ratio(claimed + conflicts, claimed),
        "lost_per_claim": ratio(outcomes["lost"], claimed),
        "claimed_messages": messages,
        "messages_per_claim": ratio(messages, claimed),
        "claims_per_s": ratio(claimed, traffic.span_s),
        "claimed_messages_per_s": ratio(messages, traffic.span_s),
        "span_s": traffic.span_s,
        "claims_by_replica": {
            name: int(d.value(CLAIMS, ledger="chat", outcome="claimed"))
            for name, d in traffic.replica_deltas.items()
        },
        "blob_operations": dict(sorted(blob_ops.items())),
        "blob_operations_per_message": ratio(sum(blob_ops.values()), delivered),
        "delivered": delivered,
        "duplicates": traffic.delivery.duplicates,
        "missing": traffic.delivery.missing,
        "exactly_once": traffic.delivery.duplicates == 0 and traffic.delivery.missing == 0,
    }


async def run(session: BenchSession) -> dict[str, Any]:
    profile = session.profile.traffic
    started_load = load_average()
    rows = [claim_row(await traffic_run(session, replicas)) for replicas in profile.replicas]
    params = {
        "replicas": list(profile.replicas),
        "chats": profile.chats,
        "rate_per_s": profile.rate_per_s,
        "window_s": profile.window_s,
        "cas_attempts": "claimed + chat-ledger CAS conflicts",
    }
    return {**envelope(NAME, session.profile.name, params, started_load), "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    table = markdown_table(
        [
            "replicas",
            "claims",
            "lost",
            "CAS attempts / claim",
            "lost / claim",
            "msgs / claim",
            "claims/s",
            "msgs/s",
            "blob ops / msg",
            "exactly once",
        ],
        [
            [
                r["replicas"],
                r["claims_by_outcome"]["claimed"],
                r["claims_by_outcome"]["lost"],
                r["cas_attempts_per_claim"],
                r["lost_per_claim"],
                r["messages_per_claim"],
                r["claims_per_s"],
                r["claimed_messages_per_s"],
                r["blob_operations_per_message"],
                r["exactly_once"],
            ]
            for r in result["rows"]
        ],
    )
    return (
        "## Claim efficiency (fleet level, from the replicas' /metrics)\n\n"
        f"{p['chats']} chats, humans posting {p['rate_per_s']}/s for {p['window_s']} s, one host per replica; "
        "rates are over the posting window plus the drain.\n\n"
        f"{table}\n\n{machine_line(result)}\n"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, description=__doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
