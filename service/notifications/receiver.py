"""``POST /graph/notifications``: the webhook Graph calls, served by every replica.

Graph validates the URL by POSTing ``?validationToken=…`` and expects the token back as text/plain
within 10 s; it expects a 2xx within 3 s for a notification batch, and retries a non-2xx or a slow
answer (Graph: "Receive change notifications through webhooks"). So the receiver does as little as it
may: check each item's ``clientState`` (the shared secret set on the subscription: an item without it
is not from our subscription and is dropped), write one batch of change hints with a single append,
nudge the email poll for mail, hand lifecycle events to the subscription manager, and answer 202 —
only after the hints are stored, so a notification is never acknowledged and then lost. If the store
does not answer in time the receiver answers 503 and Graph delivers the batch again.

The route is unauthenticated, so what a caller can make it hold is bounded before anything is read: a
declared ``Content-Length`` over the limit is refused with 413 unread, any body (chunked too) is read
no further than the chunk that passes the limit (one socket read; uvicorn pauses reading while 64 KiB
waits unread: its source, read, not measured), and at most ``max_concurrent`` requests are handled at once (the
next answers 503 with ``Retry-After``, which Graph retries: "Receive change notifications through
webhooks" — read, not run).

A notification is only a hint: nothing is claimed or delivered from it without reading Graph, so a
forged or replayed notification can cost a read, never a delivery.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from service.clock import Clock, utc_now
from service.domain.channel_place import channel_conversation_id
from service.domain.conversation import TEAM_CHANNELS
from service.ledger.fleet.hints import Hint, HintLog
from service.notifications.payloads import (
    ChangeNotification,
    NotificationBatch,
    channel_message_of,
    chat_message_of,
    is_mail,
    may_bring_a_new_message,
)
from service.storage.errors import StorageError
from service.telemetry.metrics import ChangeMetrics

log = logging.getLogger(__name__)

NOTIFICATIONS_PATH = "/graph/notifications"
MAX_BODY_BYTES = 1_000_000  # Graph batches up to 1,000 small items; anything larger is not Graph
MAX_VALIDATION_TOKEN_CHARS = 4096
HINT_WRITE_BUDGET_S = 2.0  # inside Graph's 3 s, leaving time for the answer to travel
BUSY_RETRY_AFTER_S = 1
# The echo is the caller's text sent back as text/plain: a browser must not sniff it into HTML.
_ECHO_HEADERS = {"X-Content-Type-Options": "nosniff"}


class _BodyTooLarge(Exception):
    pass


@dataclass
class NotificationReceiver:
    hints: HintLog
    client_state: str
    on_mail: Callable[[], None] = lambda: None
    on_lifecycle: Callable[[ChangeNotification], Awaitable[None]] | None = None
    clock: Clock = utc_now
    metrics: ChangeMetrics = field(kw_only=True)
    max_concurrent: int = 32  # ENTRABOT_NOTIFICATION_MAX_CONCURRENT
    _in_flight: int = field(default=0, init=False)

    def routes(self) -> list[Route]:
        return [Route(NOTIFICATIONS_PATH, self.endpoint, methods=["POST"])]

    async def endpoint(self, request: Request) -> Response:
        if self._in_flight >= self.max_concurrent:
            self._count("batch", "busy")
            return PlainTextResponse(
                "busy", status_code=503, headers={"Retry-After": str(BUSY_RETRY_AFTER_S)}
            )
        # One event loop per process: the check above and this increment run without a yield between them.
        self._in_flight += 1
        try:
            return await self._handle(request)
        finally:
            self._in_flight -= 1

    async def _handle(self, request: Request) -> Response:
        token = request.query_params.get("validationToken")
        if token is not None:
            if len(token) > MAX_VALIDATION_TOKEN_CHARS:
                return PlainTextResponse("validation token too long", status_code=400)
            self._count("validation", "echoed")
            return PlainTextResponse(token, status_code=200, headers=_ECHO_HEADERS)
        try:
            body = await _bounded_body(request, MAX_BODY_BYTES)
        except _BodyTooLarge:
            self._count("batch", "too_large")
            return PlainTextResponse(
                f"payload too large: at most {MAX_BODY_BYTES} bytes", status_code=413
            )
        except ValueError:
            return PlainTextResponse(
                "Content-Length must be a non-negative integer", status_code=400
            )
        try:
            batch = NotificationBatch.model_validate_json(body)
        except ValidationError:
            self._count("batch", "malformed")
            return PlainTextResponse('expected {"value": [change notifications]}', status_code=400)
        return await self._accept(batch)

    async def _accept(self, batch: NotificationBatch) -> Response:
        now = self.clock()
        hints: list[Hint] = []
        lifecycle: list[ChangeNotification] = []
        mail = False
        for item in batch.value:
            if not self._authentic(item):
                self._count("change", "bad_client_state")
                continue
            if item.lifecycle_event:
                lifecycle.append(item)
                self._count("lifecycle", item.lifecycle_event)
            elif (message := self._message_hint(item, now)) is not None:
                kind, hint = message
                if hint is None:
                    self._count(
                        kind, "no_new_message"
                    )  # an edit or a reaction: nothing to read for
                    continue
                hints.append(hint)
                self._count(kind, "hinted")
            elif is_mail(item):
                mail = True
                self._count("mail", "accepted")
            else:
                self._count("change", "unknown_resource")
        if hints:
            try:
                await asyncio.wait_for(self.hints.add(hints), HINT_WRITE_BUDGET_S)
            except (StorageError, TimeoutError) as exc:
                # Not acknowledged, so Graph sends it again: a notification is never dropped here.
                log.warning(
                    "change hints not stored; asking Graph to retry",
                    extra={"error": type(exc).__name__, "hints": len(hints)},
                )
                self._count("batch", "retry_requested")
                return PlainTextResponse("store unavailable", status_code=503)
        if mail:
            self.on_mail()
        if lifecycle and self.on_lifecycle is not None:
            try:
                for item in lifecycle:
                    await asyncio.wait_for(self.on_lifecycle(item), HINT_WRITE_BUDGET_S)
            except (StorageError, TimeoutError) as exc:
                # The hints above are stored; Graph resends the whole batch, and a hint twice is harmless.
                log.warning(
                    "lifecycle event not recorded; asking Graph to retry",
                    extra={"error": type(exc).__name__},
                )
                self._count("batch", "retry_requested")
                return PlainTextResponse("store unavailable", status_code=503)
        return Response(status_code=202)

    def _message_hint(
        self, item: ChangeNotification, now: datetime
    ) -> tuple[str, Hint | None] | None:
        """("chat" or "channel", its hint) for a Teams message notification, the hint None for a
        change that cannot bring a new message; None for any other resource.

        The message exists by now; its creation time is not in a basic notification, so the hint
        says "something at least as new as this moment" and the reader reads the conversation (a
        channel's reader takes replies too, so a reply hints its channel like a root)."""
        if (channel := channel_message_of(item)) is not None:
            conversation = channel_conversation_id(channel.team_id, channel.channel_id)
            hint = Hint(
                conversation, now, channel.message_id, "notification", kind=TEAM_CHANNELS.hint_tag
            )
            return "channel", hint if may_bring_a_new_message(item) else None
        if (ref := chat_message_of(item)) is not None:
            hint = Hint(ref.chat_id, now, ref.message_id, "notification")
            return "chat", hint if may_bring_a_new_message(item) else None
        return None

    def _authentic(self, item: ChangeNotification) -> bool:
        return item.client_state is not None and hmac.compare_digest(
            item.client_state.encode(), self.client_state.encode()
        )

    def _count(self, kind: str, outcome: str) -> None:
        self.metrics.graph_notifications.labels(kind=kind, outcome=outcome).inc()


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The body, read no further than the chunk that passes ``limit`` (then raises _BodyTooLarge).

    Starlette's ``Request.body()`` reads everything the caller sends; there is no size option, so the
    stream is read here with a running count. A declared length over the limit is refused unread.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ValueError(declared)
        if int(declared) > limit:
            raise _BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)
