"""Adding lines to a log that may be stored whole: one append, else a compare-and-swap rewrite.

Replicas append to their logs (an append blob on Blob). A log can also be a block blob, which refuses
appends: the single-host system's Blob backend "appended" by reading the file and writing it back
whole (its ``storage/backend.py``, read, not run), so a container it wrote holds its day's
interaction log as a block blob, and so did the day an earlier ``migrate`` ran. Served as it is, such a
day would log nothing more. ``extend_log`` still adds the lines: written back with the log under
If-Match, retried on a conflict, and settled by reading back when a write's outcome is unknown, so no
line is lost or doubled. The next UTC day's file is a fresh append blob; ``migrate`` converts the
block blobs it can (``log_migration``).
"""

from __future__ import annotations

from service.storage.backend import MemoryBackend
from service.storage.errors import (
    ConcurrencyError,
    NotAppendableError,
    StorageError,
    TransientStorageError,
)

# Each lost race is another writer's win, so with fewer than this many writing at once (a few replicas,
# each logging one record at a time) every line lands.
EXTEND_ATTEMPTS = 8


def log_lines(text: str) -> tuple[str, ...]:
    """The non-blank lines of a log, each ending in one "\\n" (a torn last line gets its newline)."""
    return tuple(line + "\n" for line in text.splitlines() if line.strip())


def _missing(lines: tuple[str, ...], stored: str) -> tuple[str, ...]:
    held = set(log_lines(stored))
    return tuple(line for line in lines if line not in held)


def _with_lines(stored: str, lines: tuple[str, ...]) -> str:
    separator = "" if not stored or stored.endswith("\n") else "\n"
    return stored + separator + "".join(lines)


async def extend_log(
    backend: MemoryBackend, key: str, text: str, *, attempts: int = EXTEND_ATTEMPTS
) -> bool:
    """Add the lines of ``text`` to the log at ``key``; False when every attempt lost a race.

    An append's own failure is raised (one whose outcome is unknown is never repeated: it may have
    landed). A line already in a stored-whole log is not written again, so its lines are best unique
    (the service's records carry their time and ids).
    """
    lines = log_lines(text)
    for _ in range(attempts):
        try:
            await backend.append_text(key, text)
            return True
        except NotAppendableError:
            pass
        stored, etag = await backend.read_text_with_etag(key)
        if stored is None:
            continue  # deleted meanwhile: the next append creates it appendable
        missing = _missing(lines, stored)
        if not missing:
            return True
        if etag is None:
            raise StorageError(f"{key} came back without an ETag, so it cannot be rewritten safely")
        try:
            await backend.write_text(key, _with_lines(stored, missing), if_match=etag)
            return True
        except ConcurrencyError:
            continue  # another writer came first; nothing of ours landed
        except TransientStorageError:
            landed = await backend.read_text(key)
            if landed is not None and not _missing(lines, landed):
                return True
            # Not there yet: if it commits later, the next write's If-Match (or append) moved past it.
    return False
