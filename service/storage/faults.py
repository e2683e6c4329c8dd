"""FaultyBackend: a MemoryBackend wrapper that injects the storage failures the ledger must survive.

Usable by any test and by the fleet harness. Faults fire by probability (a seeded ``random.Random``,
so a run is reproducible) or by script ("the next 3 writes to keys matching ``chat_cursors/*``"):

==========================  =================================================================
``READ_FAILS``              reads (and exists/list) raise ``error`` (TransientStorageError)
``READ_MISSING_ETAG``       ``read_text_with_etag`` returns the content without its ETag
``READ_CORRUPT``            reads return an HTML error page (with the real ETag)
``WRITE_FAILS``             the write never reaches the store and raises ``error``
``WRITE_RESPONSE_LOST``     the write commits, then raises ``error`` (the response was lost)
``WRITE_COMMITS_LATE``      raises ``error`` at once; the write is sent ``delay_s`` later (a
                            timed-out request that still lands)
``DELAY``                   the operation waits ``delay_s`` and then runs normally
==========================  =================================================================

Rules are tried in order; the first that matches the operation and key, has let ``skip`` matching
operations through, has firings left, and wins its probability roll fires. ``injected`` counts what
fired.
"""

from __future__ import annotations

import asyncio
import fnmatch
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError, TransientStorageError

T = TypeVar("T")

CORRUPT_PAYLOAD = "<html><body><h1>502 Bad Gateway</h1></body></html>\n"


class Op(str, Enum):
    READ = "read"  # read_text and read_text_with_etag
    WRITE = "write"
    APPEND = "append"
    EXISTS = "exists"
    LIST = "list"


class Fault(str, Enum):
    READ_FAILS = "read_fails"
    READ_MISSING_ETAG = "read_missing_etag"
    READ_CORRUPT = "read_corrupt"
    WRITE_FAILS = "write_fails"
    WRITE_RESPONSE_LOST = "write_response_lost"
    WRITE_COMMITS_LATE = "write_commits_late"
    DELAY = "delay"


_DEFAULT_OPS: dict[Fault, frozenset[Op]] = {
    Fault.READ_FAILS: frozenset({Op.READ, Op.EXISTS, Op.LIST}),
    Fault.READ_MISSING_ETAG: frozenset({Op.READ}),
    Fault.READ_CORRUPT: frozenset({Op.READ}),
    Fault.WRITE_FAILS: frozenset({Op.WRITE, Op.APPEND}),
    Fault.WRITE_RESPONSE_LOST: frozenset({Op.WRITE, Op.APPEND}),
    Fault.WRITE_COMMITS_LATE: frozenset({Op.WRITE}),
    Fault.DELAY: frozenset(Op),
}


@dataclass(frozen=True)
class FaultRule:
    fault: Fault
    key: str = "*"  # fnmatch pattern over the key (the prefix, for list)
    probability: float = 1.0
    times: int | None = None  # fire at most this many times; None: no limit
    skip: int = 0  # let this many matching operations through first ("the 2nd to 4th reads fail")
    ops: frozenset[Op] | None = None  # default: every operation the fault applies to
    delay_s: float = 0.0
    error: type[StorageError] = TransientStorageError

    def applies(self, op: Op, key: str) -> bool:
        return op in (
            self.ops if self.ops is not None else _DEFAULT_OPS[self.fault]
        ) and fnmatch.fnmatchcase(key, self.key)


@dataclass(frozen=True)
class FaultPlan:
    rules: tuple[FaultRule, ...] = ()
    seed: int = 0


@dataclass
class _Armed:
    rule: FaultRule
    left: int | None  # firings left; None: no limit
    skip: int  # matching operations still to let through


class FaultyBackend:
    """A MemoryBackend that forwards to ``inner`` except where a rule fires."""

    def __init__(self, inner: MemoryBackend, plan: FaultPlan = FaultPlan()) -> None:
        self.inner = inner
        self._armed: list[_Armed] = []
        self._random = random.Random(plan.seed)
        self._late: set[asyncio.Task[None]] = set()
        self.injected: Counter[Fault] = Counter()
        self.add(*plan.rules)

    # --- scripting ---

    def add(self, *rules: FaultRule) -> None:
        """Add rules after the existing ones (e.g. "the next 3 writes to X fail")."""
        self._armed.extend(_Armed(rule, rule.times, rule.skip) for rule in rules)

    def heal(self) -> None:
        """Remove every rule: from now on the wrapper is transparent."""
        self._armed.clear()

    async def drain(self) -> None:
        """Wait until every late write has been sent."""
        while self._late:
            await asyncio.gather(*list(self._late), return_exceptions=True)

    def _pick(self, op: Op, key: str, kinds: Iterable[Fault]) -> FaultRule | None:
        wanted = frozenset(kinds)
        for armed in self._armed:
            rule = armed.rule
            if rule.fault not in wanted or not rule.applies(op, key) or armed.left == 0:
                continue
            if armed.skip > 0:
                armed.skip -= 1
                continue
            if rule.probability < 1.0 and self._random.random() >= rule.probability:
                continue
            if armed.left is not None:
                armed.left -= 1
            self.injected[rule.fault] += 1
            return rule
        return None

    async def _delayed(self, op: Op, key: str) -> None:
        rule = self._pick(op, key, (Fault.DELAY,))
        if rule is not None:
            await asyncio.sleep(rule.delay_s)

    async def _guard_read(self, op: Op, key: str) -> None:
        await self._delayed(op, key)
        rule = self._pick(op, key, (Fault.READ_FAILS,))
        if rule is not None:
            raise rule.error(f"injected {rule.fault.value} on {op.value} of {key!r}")

    # --- MemoryBackend ---

    async def read_text(self, key: str) -> str | None:
        await self._guard_read(Op.READ, key)
        content = await self.inner.read_text(key)
        if content is not None and self._pick(Op.READ, key, (Fault.READ_CORRUPT,)) is not None:
            return CORRUPT_PAYLOAD
        return content

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        await self._guard_read(Op.READ, key)
        content, etag = await self.inner.read_text_with_etag(key)
        if content is None:
            return content, etag
        rule = self._pick(Op.READ, key, (Fault.READ_CORRUPT, Fault.READ_MISSING_ETAG))
        if rule is None:
            return content, etag
        if rule.fault is Fault.READ_CORRUPT:
            return CORRUPT_PAYLOAD, etag
        return content, None

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        return await self._write(
            Op.WRITE,
            key,
            lambda: self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent),
        )

    async def append_text(self, key: str, content: str) -> None:
        await self._write(Op.APPEND, key, lambda: self.inner.append_text(key, content))

    async def _write(self, op: Op, key: str, send: Callable[[], Awaitable[T]]) -> T:
        await self._delayed(op, key)
        rule = self._pick(
            op, key, (Fault.WRITE_FAILS, Fault.WRITE_RESPONSE_LOST, Fault.WRITE_COMMITS_LATE)
        )
        if rule is None:
            return await send()
        message = f"injected {rule.fault.value} on {op.value} of {key!r}"
        if rule.fault is Fault.WRITE_RESPONSE_LOST:
            try:
                await send()
            except StorageError:
                pass  # the caller never sees the answer, whatever it was
        elif rule.fault is Fault.WRITE_COMMITS_LATE:
            task = asyncio.create_task(self._send_late(send, rule.delay_s))
            self._late.add(task)
            task.add_done_callback(self._late.discard)
        raise rule.error(message)

    @staticmethod
    async def _send_late(send: Callable[[], Awaitable[object]], delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        try:
            await send()
        except StorageError:
            pass  # a stale If-Match, as a late request usually meets

    async def exists(self, key: str) -> bool:
        await self._guard_read(Op.EXISTS, key)
        return await self.inner.exists(key)

    async def list(self, prefix: str = "") -> list[str]:
        await self._guard_read(Op.LIST, prefix)
        return await self.inner.list(prefix)

    async def check(self) -> None:
        await self.inner.check()

    def describe(self) -> str:
        return f"FaultyBackend({self.inner.describe()})"

    async def aclose(self) -> None:
        await self.drain()
        await self.inner.aclose()
