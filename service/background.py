"""Background: the tasks a part of the replica starts and does not await itself.

A hand-over retried for a returned message, a host's record synced when its stream opens, a batch of
acknowledgements written, a permission request's expiry: each outlives the call that started it. They
are spawned here, never with a bare ``asyncio.create_task``, so the object the replica wires at start-up
owns every one of them: the replica cancels and awaits them all at shutdown, and one that raises is
logged with its name instead of vanishing with the task (asyncio only warns about it at garbage
collection, if ever).

Not an ``asyncio.TaskGroup``: a group cancels every member when one fails, where these are
independent, and it must be entered by one ``async with`` that spans the replica's life.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Background:
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _closed: bool = False

    def spawn(self, work: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``work`` now, owned here until it ends. After ``aclose`` nothing new starts: the task
        returned is cancelled before its first step, so none of ``work`` runs."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        if self._closed:
            task.cancel()
            return task
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "background task failed",
                exc_info=(type(error), error, error.__traceback__),
                extra={"task": task.get_name()},
            )

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until every task spawned so far (and any they spawn) has ended (tests, drains)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self) -> None:
        """Cancel what is still running and wait for it to end; nothing new starts afterwards."""
        self._closed = True
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
