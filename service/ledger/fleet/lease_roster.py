"""Who holds each fleet-singleton role, as the lease records under ``leases/`` say: for ``/readyz``.

Read-only and informational: the roles are the records present (a role nobody ever took has none),
each read on its own, so one unreadable or corrupt record is reported as such and hides nothing else.
Whether a lease is live is judged on this replica's clock, which may differ from the holder's by the
skew the lease's margin allows for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from service.clock import format_timestamp
from service.ledger.fleet.leases import PREFIX, LeaseRecord, lease_key, parse_lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend

_SUFFIX = ".json"


class RoleState(str, Enum):
    HELD = "held"  # an unexpired lease
    EXPIRED = "expired"  # its holder stopped renewing; the next replica to try takes it over
    VACANT = "vacant"  # the record went away between the listing and the read
    UNREADABLE = "unreadable"  # the read failed, or the record is corrupt


@dataclass(frozen=True, slots=True)
class RoleHolder:
    role: str
    state: RoleState
    record: LeaseRecord | None = None
    why: str | None = None  # for UNREADABLE: read_failed, no_etag, corrupt

    def as_json(self, me: str) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state.value}
        if self.record is not None:
            body.update(
                holder=self.record.holder,
                epoch=self.record.epoch,
                this_replica=self.record.holder == me,
                expires_at=format_timestamp(self.record.expires_at),
            )
        if self.why is not None:
            body["why"] = self.why
        return body


def roles_listed(keys: Iterable[str]) -> list[str]:
    """The role names of the lease records among ``keys`` (sorted)."""
    return sorted(
        {
            key[len(PREFIX) : -len(_SUFFIX)]
            for key in keys
            if key.startswith(PREFIX)
            and key.endswith(_SUFFIX)
            and "/" not in key[len(PREFIX) :]
            and len(key) > len(PREFIX) + len(_SUFFIX)
        }
    )


async def read_role_holder(backend: MemoryBackend, role: str, now: datetime) -> RoleHolder:
    read = await read_parsed(backend, lease_key(role), parse_lease)
    if read.outcome is ReadOutcome.ABSENT:
        return RoleHolder(role, RoleState.VACANT)
    if read.outcome is ReadOutcome.UNRESOLVED or read.value is None:
        return RoleHolder(role, RoleState.UNREADABLE, why=read.why)
    if read.value.role != role:
        return RoleHolder(role, RoleState.UNREADABLE, why="corrupt")
    return RoleHolder(
        role, RoleState.EXPIRED if read.value.expired(now) else RoleState.HELD, read.value
    )


async def read_lease_roster(backend: MemoryBackend, now: datetime) -> list[RoleHolder]:
    """Every role with a lease record, and its holder; raises StorageError when the listing fails."""
    return [
        await read_role_holder(backend, role, now)
        for role in roles_listed(await backend.list(PREFIX))
    ]
