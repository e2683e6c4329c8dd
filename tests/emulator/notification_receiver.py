"""A real webhook endpoint for the change-notification tests: a small Starlette app under uvicorn on
127.0.0.1 (port 0), recording every POST and answering as each test scripts it.

Validation requests (``?validationToken=``) are answered per path: echo (as Graph wants), wrong
(a different body), slow (after ``slow_s``), or json (the right token, wrong content type).
Notification POSTs are answered from a per-path script of replies, then 202.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

ValidationMode = Literal["echo", "wrong", "slow", "json"]


@dataclass(frozen=True)
class Received:
    path: str
    validation_token: str | None
    content_type: str
    body: Any  # parsed JSON for notifications, text otherwise
    at: float  # time.monotonic() when the request arrived (the emulator runs in this process)


@dataclass(frozen=True)
class Reply:
    status: int = 202
    delay_s: float = 0.0


class Receiver:
    def __init__(self) -> None:
        self.validation: dict[str, ValidationMode] = defaultdict(lambda: "echo")
        self.slow_s = 3.0
        self.script: dict[str, deque[Reply]] = defaultdict(deque)
        self._received: list[Received] = []
        self._changed = threading.Condition()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def url(self, path: str = "/notify") -> str:
        return self.base_url + path

    # --- what arrived ---

    def received(self, path: str | None = None) -> list[Received]:
        with self._changed:
            return [r for r in self._received if path is None or r.path == path]

    def notifications(self, path: str = "/notify") -> list[dict[str, Any]]:
        """Every changeNotification item posted to ``path``, in arrival order."""
        return [
            item
            for r in self.received(path)
            if r.validation_token is None
            for item in r.body["value"]
        ]

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out waiting for {what}; received: {self._received!r}"
                    )
                self._changed.wait(min(left, 0.1))

    # --- the app ---

    async def _handle(self, request: Request) -> Response:
        at = time.monotonic()
        path = request.url.path
        token = request.query_params.get("validationToken")
        raw = (await request.body()).decode()
        body: Any = raw
        if token is None and raw:
            body = json.loads(raw)
        with self._changed:
            self._received.append(
                Received(path, token, request.headers.get("content-type", ""), body, at)
            )
            self._changed.notify_all()
        if token is not None:
            mode = self.validation[path]
            if mode == "slow":
                await asyncio.sleep(self.slow_s)
            if mode == "wrong":
                return PlainTextResponse(token + "-tampered")
            if mode == "json":
                return JSONResponse(token)
            return PlainTextResponse(token)
        script = self.script[path]
        reply = script.popleft() if script else Reply()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        return Response(status_code=reply.status)

    def start(self) -> Receiver:
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST"])])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name="webhook-receiver",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the webhook receiver did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
