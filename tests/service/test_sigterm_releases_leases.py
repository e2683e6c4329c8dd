"""A replica SIGTERMed releases the fleet-role leases it holds, so another replica takes each role at
once instead of a lease lifetime later (35 s for discovery, 5 min for the delivery sweep before).

Two real ``entrabot-fleet serve`` processes on one Azurite container; the lease records are read
from the container itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.blob import ContainerClient

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.fleet import LocalFleet
from service.ledger.fleet.leases import LeaseRecord, lease_key, parse_lease

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

# The discovery lease lives 30 s and its successor tries every (30 - 10) / 3 s: a handover within
# this bound can only come from a release (an expiry takes 30 s and more).
HANDOVER_BOUND_S = 15.0


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ThrottleBudget.relaxed())) as running:
        yield running


def read_lease(fleet: LocalFleet, role: str) -> LeaseRecord | None:
    assert fleet.azurite is not None
    client = ContainerClient.from_connection_string(
        fleet.azurite.connection_string, fleet.container
    )
    try:
        blob = client.get_blob_client(lease_key(role))
        if not blob.exists():
            return None
        return parse_lease(blob.download_blob().readall().decode())
    finally:
        client.close()


def wait_for(check: object, what: str, bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {bound_s:.0f} s: {what}")


def test_a_sigtermed_replica_hands_its_discovery_lease_to_another_within_seconds_and_releases_every_role(
    azurite: Azurite, emulator: RunningEmulator, tmp_path: Path
) -> None:
    fleet = LocalFleet(emulator.seed, tmp_path, replicas=2, azurite=azurite, emulator=emulator)
    fleet.start()
    try:
        by_name = {m.name: m for m in fleet.members}
        wait_for(lambda: read_lease(fleet, "discovery") is not None, "a discovery holder", 30)
        first = read_lease(fleet, "discovery")
        assert first is not None and first.holder in by_name
        holder = by_name[first.holder]
        [other] = [m for m in fleet.members if m is not holder]
        # Every role the holder has a record of, as it stood before the signal.
        held_roles = [
            role
            for role in ("chat_scanner", "chat_sweep", "discovery", "delivery_sweep")
            if (r := read_lease(fleet, role)) is not None and r.holder == holder.name
        ]

        holder.terminate()
        stopped_at = time.time()
        assert holder.proc is not None and holder.proc.returncode == -15, holder.log_tail()

        def handed_over() -> bool:
            record = read_lease(fleet, "discovery")
            return record is not None and record.holder == other.name

        wait_for(handed_over, f"the discovery lease taken by {other.name}", HANDOVER_BOUND_S)
        after = read_lease(fleet, "discovery")
        assert after is not None and after.epoch > first.epoch
        for role in held_roles:
            record = read_lease(fleet, role)
            assert record is not None
            # Released: expired by the time the process was gone (or taken by the other already).
            assert record.holder == other.name or record.expires_at.timestamp() <= stopped_at, (
                role,
                record,
            )
    finally:
        for member in fleet.members:  # not fleet.stop(): the emulator is the module's
            member.terminate()
