"""What this bridge wrote to its host, remembered across its own restarts (issue 22 item 1).

Claude Code restarts stdio servers, and after a restart the fleet may hand the bridge a message again
(a resumed stream, a redelivery after failover). The dedupe window alone forgets everything when the
process ends, so the keys of what reached the host's stdin are appended to a small file per host
identity and read back at start. A key is appended *after* its write to stdin: a crash between the two
repeats the message on the next run, it never loses it.

The file is JSON lines, one key each, compacted (rewritten with the newest ``capacity`` keys, through a
temporary file and an atomic rename) once it holds twice that many, so it stays bounded however long
the host runs. A line that does not parse (a torn last write) is skipped.

Where: ``--state-dir`` / ``ENTRABOT_BRIDGE_STATE_DIR``, else ``$XDG_STATE_HOME/entrabot-bridge``, else
``~/.local/state/entrabot-bridge``; the file is named for the host identity (the fleet URL and the
working directory Claude Code starts the bridge in, or ``--host-id``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path

from service.bridge.dedupe import DedupeWindow

log = logging.getLogger(__name__)

STATE_DIR_ENV = "ENTRABOT_BRIDGE_STATE_DIR"


def default_state_dir(environ: Mapping[str, str]) -> Path:
    given = environ.get(STATE_DIR_ENV)
    if given:
        return Path(given).expanduser()
    xdg = environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "entrabot-bridge"


def host_identity(fleet_url: str, working_dir: str, host_id: str | None = None) -> str:
    """A stable name for this host: the one given, else one derived from the fleet and the project."""
    if host_id:
        return host_id
    return hashlib.sha256(f"{fleet_url}\n{working_dir}".encode()).hexdigest()[:24]


class WrittenLog:
    """The keys of messages written to the host, in a file; ``None`` path keeps them in memory only."""

    def __init__(self, path: Path | None, capacity: int) -> None:
        self._path = path
        self._capacity = capacity
        self._lines = 0
        self.window = DedupeWindow(capacity)
        self._done: OrderedDict[Hashable, None] = (
            OrderedDict()
        )  # written to the host (the window also holds queued)
        if path is not None:
            for key in self._read(path):
                self.window.first_sight(key)
                self._remember(key)

    def has_written(self, key: Hashable) -> bool:
        """Whether ``key`` reached the host's stdin (this run or a remembered one), not only its queue."""
        return key in self._done

    def _remember(self, key: Hashable) -> None:
        self._done[key] = None
        self._done.move_to_end(key)
        if len(self._done) > self._capacity:
            self._done.popitem(last=False)

    @classmethod
    def open(cls, state_dir: Path, identity: str, capacity: int) -> WrittenLog:
        """The log for ``identity`` in ``state_dir``; in memory (with a warning) when the folder is unusable."""
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            log.warning(
                "bridge state folder unusable; duplicates are dropped only until the bridge restarts",
                extra={"state_dir": str(state_dir), "error": exc.strerror},
            )
            return cls(None, capacity)
        return cls(state_dir / f"{identity}.jsonl", capacity)

    def _read(self, path: Path) -> Iterable[Hashable]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning(
                "bridge state unreadable; starting without it",
                extra={"path": str(path), "error": exc.strerror},
            )
            return []
        keys: list[Hashable] = []
        for line in text.splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, list) and all(isinstance(part, str) for part in value):
                keys.append(tuple(value))
        self._lines = len(keys)
        return keys[-self._capacity :]

    def written(self, key: tuple[str, ...]) -> None:
        """``key`` reached the host's stdin: remember it for the next run (``window`` already holds it:
        the host server marks a key there when it queues the message, so a repeat in this run is dropped
        even before the first copy is written)."""
        self._remember(key)
        if self._path is None:
            return
        try:
            with self._path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(list(key)) + "\n")
            self._lines += 1
            if self._lines > 2 * self._capacity:
                self._compact()
        except OSError as exc:
            log.warning(
                "bridge state not written; this message may repeat after a restart",
                extra={"path": str(self._path), "error": exc.strerror},
            )

    def _compact(self) -> None:
        assert self._path is not None
        keys = list(self._read(self._path))
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(
            "".join(json.dumps(list(k)) + "\n" for k in keys if isinstance(k, tuple)),
            encoding="utf-8",
        )
        os.replace(temporary, self._path)
        self._lines = len(keys)
