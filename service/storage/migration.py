"""Copy local state directories into a MemoryBackend: copy, never delete; idempotent; per-file errors.

The local copy stays in place as the rollback path (``ENTRABOT_KEEP_MEMORY_LOCAL=true``). Root-level
poll state is not copied: a machine's cursors may be stale or belong to another agent, and a copied
cursor reads back as PRESENT, bypassing the 24-hour first-sight gate and replaying old messages.
The logs replicas append to are copied so that they stay appendable (``log_migration``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from service.domain.conversation import KINDS
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError
from service.storage.keys import validate_key
from service.storage.local_tree import list_tree, read_text_under
from service.storage.log_migration import LogCopyAction, LogCopyPlan, copy_append_log, is_append_log
from service.storage.transfer import (
    DEFAULT_CONCURRENCY,
    Progress,
    ProgressCounter,
    TransferReport,
    describe_failure,
    for_each_bounded,
)

MigrationReport = TransferReport

# Excluded at the container root only; under a prefix such as claude_memory/ these names are content.
ROOT_POLL_STATE_KEYS = frozenset(
    {"poll_state/email_cursor.txt", "email_cursor.txt", "chat_id"}
    | {kind.watched_key for kind in KINDS}
)
ROOT_POLL_STATE_DIRS = tuple(kind.cursor_prefix for kind in KINDS)
# Never copied under any prefix: process locks are per machine, and LocalBackend's housekeeping
# directories (service/storage/local.py) hold lock and temp files, not state.
LOCK_SUFFIX = ".lock"
HOUSEKEEPING_DIRS = (".locks/", ".tmp/")


def normalize_prefix(prefix: str) -> str:
    """``""`` stays the container root; anything else becomes one valid key path ending in ``/``."""
    if not prefix:
        return ""
    stripped = prefix.rstrip("/")
    validate_key(stripped)
    return stripped + "/"


def is_excluded(rel: str, prefix: str) -> bool:
    """Whether the file at ``rel`` (relative to its source root) must stay behind."""
    if rel.rsplit("/", 1)[-1].endswith(LOCK_SUFFIX) or rel.startswith(HOUSEKEEPING_DIRS):
        return True
    if prefix:
        return False
    return rel in ROOT_POLL_STATE_KEYS or rel.startswith(ROOT_POLL_STATE_DIRS)


def source_overlapping(sources: Iterable[tuple[Path, str]], store_root: Path) -> Path | None:
    """The first source root that is, holds or lies inside a local store's root, if any: copying it
    into that store would copy the store into itself."""
    store = store_root.expanduser().resolve()
    for root, _ in sources:
        source = Path(root).expanduser().resolve()
        if source == store or source.is_relative_to(store) or store.is_relative_to(source):
            return source
    return None


@dataclass(frozen=True)
class SourcePlan:
    """The files of one source root that are candidates for copying, under their target prefix."""

    root: Path
    prefix: str
    files: tuple[str, ...]


def plan_sources(sources: Iterable[tuple[Path, str]], report: TransferReport) -> list[SourcePlan]:
    """Walk every source root; record exclusions and unlistable directories in ``report``."""
    plans: list[SourcePlan] = []
    for given_root, given_prefix in sources:
        prefix = normalize_prefix(given_prefix)
        root = Path(given_root).expanduser()
        if not root.exists():
            continue  # a user without a persona directory still migrates their agent data
        if not root.is_dir():
            report.errors.append((str(root), "source root is not a directory"))
            continue
        root = root.resolve()
        listing = list_tree(root)
        report.errors.extend((prefix + where, message) for where, message in listing.errors)
        candidates = []
        for rel in listing.files:
            if is_excluded(rel, prefix):
                report.excluded.append(prefix + rel)
            else:
                candidates.append(rel)
        plans.append(SourcePlan(root, prefix, tuple(candidates)))
    return plans


async def migrate_local_to_backend(
    sources: Iterable[tuple[Path, str]],
    target: MemoryBackend,
    *,
    progress: Progress | None = None,
    dry_run: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> MigrationReport:
    """Copy every file of every ``(local_root, key_prefix)`` source into ``target``.

    Keys already present are skipped; every write is a conditional create, so a replica writing the
    same key meanwhile is never overwritten. Logs the replicas append to are the exception: they are
    copied as appendable keys and merged line by line into what is there (``log_migration``). Sources
    are copied one after another, so when two map to the same key the first source wins (a log takes
    the lines of both). ``dry_run`` reads and checks every file but writes nothing.
    """
    report = TransferReport()
    plans = await asyncio.to_thread(plan_sources, list(sources), report)
    counter = ProgressCounter(sum(len(plan.files) for plan in plans), progress)
    for plan in plans:
        present = await _present_keys(target, plan.prefix, report)

        async def copy_one(
            rel: str, plan: SourcePlan = plan, present: frozenset[str] = present
        ) -> None:
            key = plan.prefix + rel
            if is_append_log(rel, plan.prefix):
                with report.outcome_of(key):
                    content = await asyncio.to_thread(read_text_under, plan.root, rel)
                    copied = await copy_append_log(
                        target, key, content, present=key in present, dry_run=dry_run
                    )
                    record_log_copy(report, key, copied)
            elif key in present:
                report.skipped.append(key)
            else:
                with report.outcome_of(key):
                    content = await asyncio.to_thread(read_text_under, plan.root, rel)
                    if not dry_run:
                        await target.write_text(key, content, if_absent=True)
                    report.copied.append(key)
            counter.advance()

        await for_each_bounded(plan.files, copy_one, limit=concurrency)
    report.sort()
    return report


def record_log_copy(report: TransferReport, key: str, copied: LogCopyPlan) -> None:
    if copied.action is LogCopyAction.CREATE:
        report.copied.append(key)
    elif copied.action is LogCopyAction.NOTHING:
        report.skipped.append(key)
    else:
        report.repaired.append(key)


async def _present_keys(
    target: MemoryBackend, prefix: str, report: TransferReport
) -> frozenset[str]:
    # One listing instead of an exists() per file: a rerun over thousands of files costs a few pages.
    try:
        return frozenset(await target.list(prefix))
    except StorageError as exc:
        # The conditional creates still never overwrite, so the copy stays correct; the failure is
        # reported because a dry run cannot tell present keys apart without the listing.
        where = prefix or "(container root)"
        report.errors.append((where, f"cannot list the target: {describe_failure(exc)}"))
        return frozenset()
