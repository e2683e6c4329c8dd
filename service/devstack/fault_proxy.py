"""FaultProxy: an HTTP reverse proxy in front of Azurite that injects the storage faults of SPEC §8.

Replicas point ``ENTRABOT_BLOB_ENDPOINT`` at the proxy instead of Azurite; every request is forwarded
unchanged (method, path, query, headers, body), so shared-key signatures still validate: they cover
the path and headers, not the host. Rules, switchable at run time, decide per request:

=====================  ===========================================================================
``COMMIT_THEN_DROP``   forward the request; if Azurite answered 2xx, close the client's connection
                       without a response: the write committed, the replica cannot know
``FAIL_BEFORE``        answer 503 ``ServerBusy`` without forwarding: nothing changed in the store
``DELAY``              wait ``delay_ms`` before forwarding (combines with the two above)
=====================  ===========================================================================

Each rule has a probability (one seeded ``random.Random``, so a run repeats given the same order of
requests), an optional method set and path regex, and an optional firing budget. ``stats()`` counts
what was injected.

Why hand-written: the fault that matters most, "the write committed and the response was lost", has
to be produced on the wire after the upstream answered, which no proxy library here offers; aiohttp
(already a dependency of the Blob SDK's async transport) does the HTTP on both sides.

The proxy runs its own event loop in a thread, so it serves at full speed whatever the caller's loop
is doing, and sync code (the fleet harness) can start and steer it.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from enum import Enum
from types import TracebackType
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

START_TIMEOUT_S = 10.0
UPSTREAM_TIMEOUT_S = 30.0
# Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection; the length is recomputed by aiohttp.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_SERVER_BUSY_BODY = (
    '<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
    "<Message>Injected by the fault proxy: the request was not forwarded.</Message></Error>"
)


class ProxyFault(str, Enum):
    COMMIT_THEN_DROP = "commit_then_drop"
    FAIL_BEFORE = "fail_before"
    DELAY = "delay"


WRITE_METHODS = frozenset(
    {"PUT"}
)  # every Blob write we make (block upload, append block, create) is a PUT


@dataclass(frozen=True)
class ProxyRule:
    fault: ProxyFault
    probability: float = 1.0
    # None: COMMIT_THEN_DROP applies to writes only (dropping a read's response proves nothing), the
    # others to every method.
    methods: frozenset[str] | None = None
    path: str | None = None  # regex searched in the request's path and query
    delay_ms: int = 0
    # Fire at most this many times (None: no limit). A COMMIT_THEN_DROP that meets a non-2xx answer
    # forwards it (nothing committed to hide) and still spends one.
    times: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], not {self.probability}")
        if self.fault is ProxyFault.DELAY and self.delay_ms <= 0:
            raise ValueError("a DELAY rule needs delay_ms > 0")
        if self.path is not None:
            re.compile(self.path)  # fail at construction, not on the first request

    def applies_to(self, method: str, target: str) -> bool:
        methods = self.methods
        if methods is None and self.fault is ProxyFault.COMMIT_THEN_DROP:
            methods = WRITE_METHODS
        if methods is not None and method.upper() not in {m.upper() for m in methods}:
            return False
        return self.path is None or re.search(self.path, target) is not None


@dataclass(frozen=True)
class Decision:
    """What to do with one request: wait ``delay_ms``, then forward, fail, or forward and drop."""

    delay_ms: int = 0
    fault: ProxyFault | None = None  # COMMIT_THEN_DROP, FAIL_BEFORE, or None (forward normally)
    fired: tuple[int, ...] = ()  # indexes of the rules that fired


def decide(
    rules: Sequence[ProxyRule],
    remaining: Sequence[int | None],
    method: str,
    target: str,
    roll: Callable[[], float],
) -> Decision:
    """The decision for one request (pure but for ``roll``): every DELAY rule that applies and wins
    its roll adds its delay; the first failing rule that applies and wins its roll decides the fate."""
    delay = 0
    fault: ProxyFault | None = None
    fired: list[int] = []
    for index, rule in enumerate(rules):
        if remaining[index] == 0 or not rule.applies_to(method, target):
            continue
        if rule.fault is not ProxyFault.DELAY and fault is not None:
            continue
        if roll() >= rule.probability:
            continue
        fired.append(index)
        if rule.fault is ProxyFault.DELAY:
            delay += rule.delay_ms
        else:
            fault = rule.fault
    return Decision(delay, fault, tuple(fired))


@dataclass(frozen=True)
class ProxyStats:
    requests: int = 0  # every request the proxy received
    forwarded: int = 0  # of those, sent on to the upstream
    commit_then_drop: int = 0  # upstream answered 2xx and the client got no response
    fail_before: int = 0
    delayed: int = 0
    upstream_errors: int = 0  # the upstream could not be reached (answered 502)

    @property
    def injected(self) -> int:
        return self.commit_then_drop + self.fail_before + self.delayed


class FaultProxy:
    """A fault-injecting reverse proxy for one Blob endpoint (see the module docstring).

    ::

        with FaultProxy(azurite.blob_endpoint, random_seed=7) as proxy:
            proxy.set_rules([ProxyRule(ProxyFault.COMMIT_THEN_DROP, probability=0.05)])
            ...  # clients use proxy.blob_endpoint
            print(proxy.stats())
    """

    def __init__(
        self, upstream_endpoint: str, *, random_seed: int | None = 0, host: str = "127.0.0.1"
    ) -> None:
        parts = urlsplit(upstream_endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"upstream_endpoint must be an http(s) URL, e.g. http://127.0.0.1:10000/devstoreaccount1; "
                f"got {upstream_endpoint!r}"
            )
        self._upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self._account_path = parts.path.rstrip("/")
        self._host = host
        self._random = random.Random(random_seed)
        self._lock = threading.Lock()
        self._rules: list[ProxyRule] = []
        self._remaining: list[int | None] = []
        self._counts: Counter[str] = Counter()
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None

    # --- addresses ---

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the fault proxy is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def blob_endpoint(self) -> str:
        """The upstream's Blob endpoint as seen through the proxy (same account path)."""
        return f"{self.base_url}{self._account_path}"

    # --- rules and counters (thread-safe) ---

    def set_rules(self, rules: Iterable[ProxyRule]) -> None:
        """Replace every rule at once (the budgets of the new rules start full)."""
        new = list(rules)
        with self._lock:
            self._rules = new
            self._remaining = [r.times for r in new]

    def add(self, *rules: ProxyRule) -> None:
        with self._lock:
            self._rules.extend(rules)
            self._remaining.extend(r.times for r in rules)

    def clear(self) -> None:
        self.set_rules(())

    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(**{f.name: self._counts[f.name] for f in fields(ProxyStats)})

    def _decide(self, method: str, target: str) -> Decision:
        with self._lock:
            self._counts["requests"] += 1
            decision = decide(self._rules, self._remaining, method, target, self._random.random)
            for index in decision.fired:
                if self._remaining[index] is not None:
                    self._remaining[index] -= 1  # type: ignore[operator]
            if decision.delay_ms:
                self._counts["delayed"] += 1
            return decision

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    # --- lifecycle ---

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("the fault proxy is already running")
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(started))
            except BaseException as exc:  # noqa: BLE001 - reported to start()'s caller
                failure.append(exc)
                started.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="blob-fault-proxy", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S) or failure:
            self.stop()
            raise RuntimeError(
                f"the fault proxy did not start: {failure[0] if failure else 'timed out'}"
            )
        return self

    def stop(self) -> None:
        loop, stopped, thread = self._loop, self._stopped, self._thread
        if loop is not None and stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:
                pass  # the loop already closed
        if thread is not None:
            thread.join(START_TIMEOUT_S)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def _serve(self, started: threading.Event) -> None:
        self._stopped = asyncio.Event()
        session = aiohttp.ClientSession(
            # Forward bytes as they came: no decompression, no added Content-Type or User-Agent (the
            # shared-key signature covers Content-Type).
            auto_decompress=False,
            skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_S),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self._session = session
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, 0)
        await site.start()
        server = site._server  # aiohttp exposes the bound port only through the asyncio server
        assert isinstance(server, asyncio.Server)  # typed as AbstractServer, which has no sockets
        self._port = server.sockets[0].getsockname()[1]
        started.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()
            await session.close()

    # --- one request ---

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        session = self._session
        assert session is not None
        target = request.raw_path
        decision = self._decide(request.method, target)
        if decision.delay_ms:
            await asyncio.sleep(decision.delay_ms / 1000)
        if decision.fault is ProxyFault.FAIL_BEFORE:
            self._count("fail_before")
            return web.Response(
                status=503,
                text=_SERVER_BUSY_BODY,
                content_type="application/xml",
                headers={"x-ms-error-code": "ServerBusy"},
            )
        body = await request.read()
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP
        )
        try:
            async with session.request(
                request.method,
                URL(self._upstream_origin + target, encoded=True),
                headers=headers,
                data=body,
                allow_redirects=False,
            ) as upstream:
                payload = await upstream.read()
                status, reason = upstream.status, upstream.reason
                response_headers = CIMultiDict(
                    (k, v) for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP
                )
                length = upstream.headers.get("Content-Length")
        except (aiohttp.ClientError, TimeoutError):
            self._count("upstream_errors")
            return web.Response(status=502, text="the fault proxy could not reach the upstream")
        self._count("forwarded")
        if decision.fault is ProxyFault.COMMIT_THEN_DROP and 200 <= status < 300:
            self._count("commit_then_drop")
            transport = request.transport
            if transport is not None:
                transport.abort()  # no response, not even a status line: "committed, response lost"
            # aiohttp's own path for a client gone mid-request: close the connection, write nothing.
            raise asyncio.CancelledError
        if request.method == "HEAD" and length is not None:
            # A HEAD answer carries the blob's length with no body; keep it rather than "0".
            response = web.StreamResponse(status=status, reason=reason, headers=response_headers)
            response.content_length = int(length)
            await response.prepare(request)
            return response
        return web.Response(status=status, reason=reason, body=payload, headers=response_headers)
