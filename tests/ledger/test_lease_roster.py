"""The roles /readyz lists are the lease records present: ``leases/<role>.json``, nothing else."""

from __future__ import annotations

from service.ledger.fleet.lease_roster import roles_listed


def test_only_lease_records_directly_under_leases_name_a_role() -> None:
    keys = [
        "leases/discovery.json",
        "leases/chat_scanner.json",
        "leases/.json",
        "leases/old/x.json",
        "leases/notes.txt",
        "watched/members.json",
        "leases/discovery.json",
    ]
    assert roles_listed(keys) == ["chat_scanner", "discovery"]
