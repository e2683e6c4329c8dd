"""One running bridge per host identity: a second one in the same project takes an identity of its own.

The fleet owes an acknowledging host what it claims for it, and pushes it to every live session of that
host; the bridge's written-messages file is that host's too. Two Claude Code sessions started in one
project folder would derive one identity and share both, so each would get the other's messages. The
bridge holds an exclusive lock on ``<state dir>/<identity>.lock`` while it runs: a restart (Claude Code
restarts a stdio server after the old process ended) gets the identity back, and a second bridge running
beside the first takes ``<identity>~2`` (then ``~3``...), whose own record and file it keeps across its
restarts as long as the first runs. The lock is the kernel's (``flock``), so a bridge that was killed
leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_SIBLINGS = 16


@dataclass
class HostLock:
    identity: str
    _fd: int | None = None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_host_identity(state_dir: Path | None, identity: str) -> HostLock:
    """The identity this bridge runs as, locked for as long as it runs (no state folder: unlocked)."""
    if state_dir is None:
        return HostLock(identity)
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return HostLock(identity)  # WrittenLog.open says why the folder is unusable
    for n in range(1, MAX_SIBLINGS + 1):
        candidate = identity if n == 1 else f"{identity}~{n}"
        fd = os.open(state_dir / f"{candidate}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if n > 1:
            log.warning(
                "another bridge runs as this host; this one is a host of its own",
                extra={"host_id": candidate},
            )
        return HostLock(candidate, fd)
    raise RuntimeError(
        f"{MAX_SIBLINGS} bridges already run as host {identity!r} in {state_dir}; stop one"
    )
