"""The Graph transport: the request loop every resource client's call goes through, over one pooled
httpx client.

Each send carries the agent user's token through ``BearerAuth`` (one refresh on 401, inside the send),
and the loop around it applies the two other layers: ``retrying`` (429 Retry-After, backoff on
idempotent 5xx, a resend when the request never left) and ``pacing`` (the client-wide hold after Graph
said "later", shared with the fleet). Each send records ``graph_requests{route, status}`` with a route
template (never a raw id) and opens one OpenTelemetry span. Collections are read page by page as async
iterators, so a caller can stop as soon as it has what it needs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from opentelemetry import trace
from pydantic import BaseModel

from service.graph.answers import answer_item, answer_json, error_for
from service.graph.auth.tokens import TokenProvider
from service.graph.bearer import BearerAuth
from service.graph.errors import GraphConnectionError, GraphPayloadError
from service.graph.pacing import GraphPacing
from service.graph.pages import Page, parse_page
from service.graph.retry_policy import Action, Attempt
from service.graph.retrying import RetryLayer
from service.graph.urls import GraphUrls
from service.telemetry.metrics import GraphMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

T = TypeVar("T", bound=BaseModel)

# Exceptions raised before a single byte of the request left this process: safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class GraphCall:
    method: str
    url: str
    route: str
    idempotent: bool  # whether sending it twice leaves Graph as sending it once
    json: Any = None
    content: bytes | None = None  # a raw body (a file upload) instead of JSON
    headers: Mapping[str, str] | None = None


class GraphSender:
    """The single send: one span and one count per answer, the token attached by the call's auth."""

    def __init__(self, http: httpx.AsyncClient, metrics: GraphMetrics) -> None:
        self.http = http
        self.metrics = metrics

    async def send(self, call: GraphCall, auth: BearerAuth | None, attempt: int) -> httpx.Response:
        """``auth`` None: a pre-authenticated URL (a download or upload URL Graph handed out), which
        must not see the bearer token."""
        attributes: dict[str, str | int] = {
            "http.request.method": call.method,
            "url.template": call.route,
            "http.request.resend_count": attempt - 1,
        }
        with tracer.start_as_current_span(
            f"Graph {call.method} {call.route}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                response = await self.http.request(
                    call.method,
                    call.url,
                    json=call.json,
                    content=call.content,
                    headers={"Accept": "application/json", **(call.headers or {})},
                    auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                span.set_attribute("error.type", type(exc).__name__)
                self._count(call.route, "error")
                raise
            span.set_attribute("http.response.status_code", response.status_code)
            request_id = response.headers.get("request-id")
            if request_id:
                span.set_attribute("graph.request_id", request_id)
        # ``history`` holds the 401 that the auth flow answered with a fresh token: an answer too.
        for answer in (*response.history, response):
            self._count(call.route, str(answer.status_code))
            if answer.status_code == 429:
                self.metrics.graph_throttles.labels(route=call.route).inc()
        return response

    def _count(self, route: str, status: str) -> None:
        self.metrics.graph_requests.labels(route=route, status=status).inc()


class GraphTransport:
    def __init__(
        self,
        urls: GraphUrls,
        tokens: TokenProvider,
        *,
        scope: str,
        sender: GraphSender,
        retry: RetryLayer,
        pacing: GraphPacing,
    ) -> None:
        self.urls = urls
        self._tokens = tokens
        self._scope = scope
        self._sender = sender
        self._retry = retry
        # Graph's limits are per app, and a throttled request counts against them: after a 429 (or a
        # 5xx saying "later") every request of this client waits, not only the one that got it, or
        # the other concurrent reads keep the window full.
        self._pacing = pacing

    @property
    def metrics(self) -> GraphMetrics:
        return self._sender.metrics

    def with_tokens(self, tokens: TokenProvider) -> GraphTransport:
        """The same Graph, connections, metrics, retry rules and holds (one app's budget: a hold on
        either holds both), acting with other tokens."""
        return GraphTransport(
            self.urls,
            tokens,
            scope=self._scope,
            sender=self._sender,
            retry=self._retry,
            pacing=self._pacing,
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        route: str,
        json: Any = None,
        idempotent: bool,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        redirect_ok: bool = False,
    ) -> httpx.Response:
        """``redirect_ok``: a 3xx is the answer (a download's 302 to its pre-authenticated URL), handed
        back for the caller to follow without the token; otherwise a 3xx is an error."""
        # A loop of our own: httpx's transport ``retries`` only repeats a failed connect, and knows
        # neither Retry-After, nor which methods are safe to send twice, nor the client-wide hold.
        call = GraphCall(method, url, route, idempotent, json, content, headers)
        auth = BearerAuth(self._tokens, self._scope)
        number = 0
        waited_out = 0.0  # the hold this call already slept through as its own retry delay
        while True:
            number += 1
            waited_out = await self._pacing.admit(waited_out)
            try:
                response = await self._sender.send(call, auth, number)
            except httpx.TransportError as exc:
                self._pacing.note(None, None, route)
                sent = not isinstance(exc, _NOT_SENT)
                attempt = Attempt(number, idempotent, request_sent=sent, refreshed=auth.refreshed)
                step = self._retry.decide(attempt, None, None)
                if step.action is Action.RETRY:
                    await self._retry.wait(step.delay)
                    continue
                raise _no_answer(call, exc, sent) from None
            except BaseException:
                self._pacing.note(None, None, route)  # cancelled mid-request: free the probe slot
                raise
            # The auth flow already refreshed the token on a 401: a 401 here is its verdict (DONE).
            attempt = Attempt(number, idempotent, refreshed=auth.refreshed)
            step = self._retry.decide(
                attempt, response.status_code, response.headers.get("Retry-After")
            )
            self._pacing.note(response.status_code, step.retry_after, route)
            if step.action is Action.RETRY:
                waited_out = await self._retry.wait_with_hold(step.delay, self._pacing, waited_out)
                continue
            if response.is_success or (redirect_ok and response.is_redirect):
                return response
            raise error_for(response, method, route, step.retry_after, idempotent)

    async def send_preauthenticated(
        self,
        method: str,
        url: str,
        *,
        route: str,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One send to a URL Graph handed out already authenticated (a download's Location, an upload
        session's uploadUrl): no bearer token, no retry loop (the caller knows how to resume), counted
        and traced as any send. Transport failures raise GraphConnectionError."""
        call = GraphCall(method, url, route, idempotent=False, content=content, headers=headers)
        try:
            return await self._sender.send(call, None, 1)
        except httpx.TransportError as exc:
            raise _no_answer(call, exc, not isinstance(exc, _NOT_SENT)) from None

    async def get_one(
        self,
        model: type[T],
        kind: str,
        template: str,
        *ids: str,
        params: Mapping[str, str | int] | None = None,
    ) -> T:
        url, route = self.urls.url(template, *ids, params=params)
        response = await self.request("GET", url, route=route, idempotent=True)
        return self.item(response, model, kind, route)

    def item(self, response: httpx.Response, model: type[T], kind: str, route: str) -> T:
        return answer_item(response, model, kind=kind, route=route, metrics=self.metrics)

    def page(self, response: httpx.Response, model: type[T], kind: str, route: str) -> Page[T]:
        return parse_page(answer_json(response, route), model, kind=kind, metrics=self.metrics)

    async def collect(
        self, url: str, route: str, model: type[T], kind: str, max_pages: int
    ) -> list[T]:
        items: list[T] = []
        async for page in self.pages(url, route, model, kind, max_pages):
            items.extend(page.items)
        return items

    async def pages(
        self, url: str, route: str, model: type[T], kind: str, max_pages: int
    ) -> AsyncGenerator[Page[T], None]:
        next_url: str | None = url
        for _ in range(max_pages):
            if next_url is None:
                return
            response = await self.request("GET", next_url, route=route, idempotent=True)
            page = self.page(response, model, kind, route)
            yield page
            next_url = page.next_link
            if next_url is not None and not self.urls.same_origin(next_url):
                base = self.urls.base
                log.warning(
                    "refused an @odata.nextLink on %s that leaves the Graph origin %s", route, base
                )
                raise GraphPayloadError(
                    f"Graph's next page link on {route} points away from {base}; paging stopped "
                    "there so the token is not sent elsewhere (check ENTRABOT_GRAPH_URL and any proxy)"
                )


def _no_answer(call: GraphCall, exc: httpx.TransportError, sent: bool) -> GraphConnectionError:
    unknown = sent and not call.idempotent
    return GraphConnectionError(
        f"Graph {call.method} {call.route}: no answer ({type(exc).__name__})"
        + ("; it may have been carried out, do not repeat it blindly" if unknown else ""),
        outcome_unknown=unknown,
    )
