"""How migration copies a log the service appends to: as an appendable key, merged line by line.

Replicas append to the interaction log (``interactions/<day>.jsonl``), the hints (``hints/``) and the
lifecycle log (``notifications/lifecycle.jsonl``). On Blob an append needs an append blob; a key
written whole is a block blob, and every append to it fails ("not an append blob") — which is what
an earlier ``migrate`` did to the day it ran: that UTC day's interactions were not logged.

So a log is copied with appends, and a log already present at the target is not simply skipped:

* absent → CREATE: appended whole (the first append creates the append blob);
* a block blob holding only lines of the local copy (what the earlier ``migrate`` wrote) → CONVERT:
  recreated as an empty append blob with If-Match on the ETag just read, then the local lines are
  appended. A crash in between leaves an append blob missing lines, which the next run APPENDs:
  the local copy, never deleted, is what makes that safe;
* otherwise APPEND the local lines it lacks (NOTHING when it has them all). A replica may have started
  the day's file before ``migrate`` ran; its lines stay, ours join them. A block blob with lines the
  local copy lacks (the service extended it, ``log_append``) is not recreated, since a crash could
  lose those: the lines are added by compare-and-swap, and it stays a block blob until its day ends.

Lines are compared as text, so a rerun appends nothing twice. Two ``migrate`` runs at once could both
append the same missing line; ``migrate`` is an operator's one-off, run once at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.storage.log_append import extend_log, log_lines

# Matched at the container root only: under a prefix such as claude_memory/ a .jsonl file is content.
APPEND_LOG_PREFIXES = ("interactions/", "hints/")
APPEND_LOG_KEYS = frozenset({"notifications/lifecycle.jsonl"})
# Azure takes append blocks of up to 4 MiB on older API versions (100 MiB on newer ones).
MAX_APPEND_BYTES = 4 * 1024 * 1024


def is_append_log(rel: str, prefix: str) -> bool:
    """Whether the file at ``rel`` (under a source copied to ``prefix``) is a log replicas append to."""
    return not prefix and (rel in APPEND_LOG_KEYS or rel.startswith(APPEND_LOG_PREFIXES))


@runtime_checkable
class AppendTypeRepair(Protocol):
    """A store whose keys have a type, so a key written whole refuses appends (BlobBackend).

    A store without it (LocalBackend: a file takes appends however it was written) needs no repair.
    """

    async def accepts_appends(self, key: str) -> bool: ...

    async def recreate_appendable(self, key: str, *, if_match: str) -> None: ...


class LogCopyAction(str, Enum):
    CREATE = "create"
    APPEND = "append"
    CONVERT = "convert"
    NOTHING = "nothing"


@dataclass(frozen=True)
class LogCopyPlan:
    action: LogCopyAction
    lines: tuple[str, ...] = ()  # to append, each ending in "\n"


def plan_log_copy(local: str, stored: str | None, *, appendable: bool) -> LogCopyPlan:
    """What copying a local log to a target holding ``stored`` (None: absent) must do."""
    lines = log_lines(local)
    if stored is None:
        return LogCopyPlan(LogCopyAction.CREATE, lines)
    present = set(log_lines(stored))
    if not appendable and present <= set(lines):
        return LogCopyPlan(LogCopyAction.CONVERT, lines)
    missing = tuple(line for line in lines if line not in present)
    return (
        LogCopyPlan(LogCopyAction.APPEND, missing)
        if missing
        else LogCopyPlan(LogCopyAction.NOTHING)
    )


def append_batches(lines: Iterable[str], limit: int = MAX_APPEND_BYTES) -> Iterator[str]:
    """Whole lines joined into appends of at most ``limit`` bytes (a longer line goes alone)."""
    batch: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode("utf-8"))
        if batch and size + length > limit:
            yield "".join(batch)
            batch, size = [], 0
        batch.append(line)
        size += length
    if batch:
        yield "".join(batch)


async def copy_append_log(
    target: MemoryBackend, key: str, local: str, *, present: bool, dry_run: bool = False
) -> LogCopyPlan:
    """Carry out ``plan_log_copy`` for ``key`` (``present``: the target's listing holds it)."""
    stored, etag = (await target.read_text_with_etag(key)) if present else (None, None)
    appendable = (
        stored is None
        or not isinstance(target, AppendTypeRepair)
        or await target.accepts_appends(key)
    )
    plan = plan_log_copy(local, stored, appendable=appendable)
    if dry_run or plan.action is LogCopyAction.NOTHING:
        return plan
    if plan.action is LogCopyAction.CONVERT:
        assert isinstance(
            target, AppendTypeRepair
        )  # only a store with key types plans a conversion
        await _recreate(target, key, etag)
    if plan.action is LogCopyAction.CREATE and not plan.lines:
        await target.append_text(key, "")  # an empty log still becomes an appendable key
    for batch in append_batches(plan.lines):
        if not await extend_log(target, key, batch):
            raise StorageError(
                f"{key} kept changing while migrate added its lines; run migrate again"
            )
    return plan


async def _recreate(target: AppendTypeRepair, key: str, etag: str | None) -> None:
    if etag is None:
        raise StorageError(
            f"{key} came back without an ETag, so it cannot be replaced safely; not converted"
        )
    try:
        await target.recreate_appendable(key, if_match=etag)
    except ConcurrencyError:
        raise StorageError(
            f"{key} changed while migrate was converting it; nothing lost, run migrate again"
        ) from None
