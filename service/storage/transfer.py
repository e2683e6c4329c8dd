"""What copying many files between local disk and the store shares: the report and the bounded runner.

Migration (disk → store), persona push (disk → store) and persona pull (store → disk) each copy file by
file, record every outcome per key, and must never let one bad file stop the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from service.storage.errors import ConcurrencyError, StorageError
from service.storage.local_tree import LocalTreeError, OutsideRootError

T = TypeVar("T")

# Blob calls are network round trips (~5-10 ms each); 16 in flight keeps thousands of files quick
# without opening more connections than the SDK's pool holds.
DEFAULT_CONCURRENCY = 16

Progress = Callable[[int, int], None]


@dataclass
class TransferReport:
    """The outcome of a copy, key by key.

    ``copied``: written (or, in a dry run, would be). ``repaired``: a log already at the destination that
    was missing local lines or could not take appends (see ``log_migration``). ``skipped``: already
    present at the destination, or another writer created it first. ``excluded``: deliberately not copied (poll state, lock files).
    ``rejected``: a path or key that leads outside its root. ``errors``: (key, message) for a file that
    could not be read or written.
    """

    copied: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when anything the caller asked for was not copied for a reason they must look at."""
        return not self.errors and not self.rejected

    def sort(self) -> None:
        """Order every list by key, so reports of concurrent copies read the same run after run."""
        for name in ("copied", "repaired", "skipped", "excluded", "rejected", "errors"):
            getattr(self, name).sort()

    def summary(self, *, dry_run: bool = False) -> str:
        copied = "would copy" if dry_run else "copied"
        # Only migration repairs, and rarely: the line stays as it was when there is nothing to say.
        repaired = (
            f", {'would repair' if dry_run else 'repaired'} {len(self.repaired)}"
            if self.repaired
            else ""
        )
        return (
            f"{copied} {len(self.copied)}{repaired}, skipped {len(self.skipped)} (already present), "
            f"excluded {len(self.excluded)}, rejected {len(self.rejected)}, errors {len(self.errors)}"
        )

    @contextmanager
    def outcome_of(self, key: str) -> Iterator[None]:
        """Record a failure of the enclosed copy of ``key`` instead of raising it.

        A conditional create that lost means another writer got there first: the key is present,
        which is what a copy that skips present keys wants, so it counts as skipped.
        """
        try:
            yield
        except ConcurrencyError:
            self.skipped.append(key)
        except OutsideRootError as exc:
            self.rejected.append((key, str(exc)))
        except (LocalTreeError, StorageError, OSError, ValueError) as exc:
            self.errors.append((key, describe_failure(exc)))


def describe_failure(exc: BaseException) -> str:
    """One line for a report: the OS reason without the errno noise, else the exception's message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


async def for_each_bounded(
    items: Iterable[T], action: Callable[[T], Awaitable[None]], *, limit: int = DEFAULT_CONCURRENCY
) -> None:
    """Await ``action(item)`` for every item, at most ``limit`` at a time.

    A fixed pool of workers pulls from one shared iterator (``next`` never awaits, so no two workers
    take the same item); memory stays flat however many items there are, unlike a task per item.
    """
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await action(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, limit)):
            group.create_task(worker())


class ProgressCounter:
    """Counts finished items and reports (done, total) to an optional callback."""

    def __init__(self, total: int, callback: Progress | None) -> None:
        self.total = total
        self.done = 0
        self._callback = callback
        if callback is not None:
            callback(0, total)

    def advance(self) -> None:
        self.done += 1
        if self._callback is not None:
            self._callback(self.done, self.total)
