"""Local poll-state files that a cloud backend ignores.

With a cloud backend the watched list and the email cursor live only in the shared container: a
machine's ``data_dir/watched_chats`` or ``data_dir/email_cursor.txt`` may be stale or belong to
another agent, so they are never read or written. Start-up says so once.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

log = logging.getLogger(__name__)

LOCAL_POLL_STATE_FILES = ("watched_chats", "email_cursor.txt")


async def note_ignored_local_poll_state(data_dir: Path, *, is_cloud: bool) -> tuple[Path, ...]:
    """Log one info line naming the local poll-state files a cloud backend ignores; return them."""
    if not is_cloud:
        return ()
    root = Path(data_dir).expanduser()
    found = await asyncio.to_thread(
        lambda: tuple(root / n for n in LOCAL_POLL_STATE_FILES if (root / n).is_file())
    )
    if found:
        log.info(
            "cloud backend: ignoring local poll state %s; the shared container is authoritative",
            ", ".join(str(path) for path in found),
        )
    return found
