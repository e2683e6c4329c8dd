"""GraphClient rules over httpx.MockTransport: retries, token refresh, nextLink origin, errors, routes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import httpx
import pytest

from service.graph.auth.tokens import AccessToken
from service.graph.client import GraphClient
from service.graph.errors import (
    GraphAuthError,
    GraphBadRequest,
    GraphConnectionError,
    GraphError,
    GraphForbidden,
    GraphNotFound,
    GraphPayloadError,
    GraphServerError,
    GraphThrottled,
)
from service.graph.options import GraphOptions
from service.graph.retry_policy import RetryPolicy
from service.graph.urls import graph_timestamp
from service.telemetry.metrics import Metrics

BASE = "https://graph.test/v1.0"
NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc).timestamp()
CHAT = "19:abc@thread.v2"

Handler = Callable[[httpx.Request], httpx.Response]


class CountingTokens:
    """A token provider that hands out token-1, token-2… and records invalidations."""

    def __init__(self) -> None:
        self.issued = 0
        self.invalidated: list[str | None] = []
        self._current: AccessToken | None = None

    async def get_token(self, scope: str) -> AccessToken:
        if self._current is None:
            self.issued += 1
            self._current = AccessToken(f"token-{self.issued}", NOW + 3600)
        return self._current

    def invalidate(self, scope: str, rejected: str | None = None) -> None:
        self.invalidated.append(rejected)
        if self._current is not None and rejected in (None, self._current.token):
            self._current = None


class Recorder:
    def __init__(self, handler: Handler) -> None:
        self.requests: list[httpx.Request] = []
        self._handler = handler

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._handler(request)


def make_client(
    handler: Handler,
    *,
    tokens: CountingTokens | None = None,
    metrics: Metrics | None = None,
    retry_policy: RetryPolicy | None = None,
) -> tuple[GraphClient, Recorder, list[float]]:
    recorder = Recorder(handler)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    client = GraphClient(
        GraphOptions(BASE, retry=retry_policy or RetryPolicy()),
        tokens or CountingTokens(),
        http=httpx.AsyncClient(transport=httpx.MockTransport(recorder)),
        metrics=(metrics or Metrics()).graph,
        clock=lambda: NOW,
        sleep=sleep,
    )
    return client, recorder, slept


def page(items: list[dict[str, object]], next_link: str | None = None) -> httpx.Response:
    body: dict[str, object] = {"value": items}
    if next_link:
        body["@odata.nextLink"] = next_link
    return httpx.Response(200, json=body)


def msg(mid: str) -> dict[str, object]:
    return {
        "id": mid,
        "messageType": "message",
        "createdDateTime": "2026-11-20T10:00:00Z",
        "from": {"user": {"id": "u-1"}},
        "body": {"contentType": "text", "content": "hi"},
    }


def chat(cid: str) -> dict[str, object]:
    return {"id": cid, "chatType": "group", "topic": "t"}


def graph_error(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {
        "error": {
            "code": code,
            "message": f"{code} happened",
            "innerError": {"request-id": "rid-1"},
        }
    }
    return httpx.Response(status, json=body, headers=headers)


async def test_next_link_to_another_host_is_refused_and_no_token_is_sent_there() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "graph.test":
            return page(
                [msg("m1")], next_link="https://evil.test/v1.0/chats/x/messages?$skiptoken=1"
            )
        return page([msg("stolen")])

    client, recorder, _ = make_client(handler)
    seen: list[str] = []
    with pytest.raises(GraphPayloadError, match="points away"):
        async for p in client.messages.list_chat_messages(CHAT, since=None):
            seen.extend(m.id for m in p.items)
    assert seen == ["m1"]
    assert {r.url.host for r in recorder.requests} == {"graph.test"}


@pytest.mark.parametrize(
    "link",
    [
        "http://graph.test/v1.0/next",  # scheme differs
        "https://graph.test:8443/v1.0/next",  # port differs
        "https://graph.test.evil.test/v1.0/next",  # host differs
        "/v1.0/next",  # relative: no origin to compare
    ],
)
async def test_next_link_must_match_scheme_host_and_port(link: str) -> None:
    client, recorder, _ = make_client(lambda r: page([chat("c1")], next_link=link))
    with pytest.raises(GraphPayloadError):
        await client.chats.list_chat_members("c1")
    assert len(recorder.requests) == 1


async def test_next_link_on_the_graph_origin_is_followed_verbatim() -> None:
    second = "https://graph.test:443/v1.0/chats/c/messages?$skiptoken=abc%3D%3D"

    def handler(request: httpx.Request) -> httpx.Response:
        if "skiptoken" in str(request.url):
            return page([msg("m2")])
        return page([msg("m1")], next_link=second)

    client, recorder, _ = make_client(handler)
    ids = [
        m.id async for p in client.messages.list_chat_messages(CHAT, since=None) for m in p.items
    ]
    assert ids == ["m1", "m2"]
    assert recorder.requests[1].url.query == b"$skiptoken=abc%3D%3D"


async def test_a_caller_can_stop_paging_early() -> None:
    client, recorder, _ = make_client(lambda r: page([msg("m")], next_link=f"{BASE}/more"))
    async for _ in client.messages.list_chat_messages(CHAT, since=None, max_pages=10):
        break
    assert len(recorder.requests) == 1


async def test_message_query_uses_graph_literal_names_and_a_truncated_utc_timestamp() -> None:
    client, recorder, _ = make_client(lambda r: page([]))
    since = datetime(2026, 11, 20, 10, 0, 0, 999_999, tzinfo=timezone.utc)
    async for _ in client.messages.list_chat_messages(CHAT, since=since, top=50):
        pass
    url = str(recorder.requests[0].url)
    assert "/chats/19:abc@thread.v2/messages?" in url
    assert "$filter=lastModifiedDateTime%20gt%202026-11-20T10:00:00.999Z" in url
    assert "$orderby=lastModifiedDateTime%20desc" in url and "$top=50" in url


def test_graph_timestamp_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        graph_timestamp(datetime(2026, 1, 1))


async def test_ids_cannot_climb_out_of_their_collection() -> None:
    client, recorder, _ = make_client(lambda r: page([]))
    with pytest.raises(ValueError):
        await client.chats.get_chat("..")
    async for _ in client.messages.list_chat_messages("a/../../users", since=None):
        pass
    assert recorder.requests[0].url.raw_path.startswith(b"/v1.0/chats/a%2F..%2F..%2Fusers/messages")


async def test_throttled_get_waits_the_http_date_retry_after_and_counts_the_throttle() -> None:
    metrics = Metrics()
    answers = iter(
        [
            graph_error(429, "TooManyRequests", {"Retry-After": "Fri, 20 Nov 2026 12:00:12 GMT"}),
            page([]),
        ]
    )
    client, recorder, slept = make_client(lambda r: next(answers), metrics=metrics)
    async for _ in client.messages.list_chat_messages(CHAT, since=None):
        pass
    assert slept == [12.0]
    assert len(recorder.requests) == 2
    route = "chats/{id}/messages"
    assert (
        metrics.registry.get_sample_value("entrabot_graph_throttles_total", {"route": route}) == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "entrabot_graph_requests_total", {"route": route, "status": "429"}
        )
        == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "entrabot_graph_requests_total", {"route": route, "status": "200"}
        )
        == 1
    )


async def test_retry_after_beyond_the_cap_raises_throttled_without_waiting() -> None:
    client, recorder, slept = make_client(
        lambda r: graph_error(429, "TooManyRequests", {"Retry-After": "120"}),
        retry_policy=RetryPolicy(max_retry_after=60),
    )
    with pytest.raises(GraphThrottled) as caught:
        await client.directory.get_me()
    assert caught.value.retry_after == 120.0 and slept == [] and len(recorder.requests) == 1


async def test_throttling_is_retried_a_bounded_number_of_times() -> None:
    client, recorder, slept = make_client(
        lambda r: graph_error(429, "TooManyRequests", {"Retry-After": "1"}),
        retry_policy=RetryPolicy(max_attempts=3),
    )
    with pytest.raises(GraphThrottled):
        await client.directory.get_me()
    assert len(recorder.requests) == 3 and slept == [1.0, 1.0]


async def test_throttled_send_is_retried_and_posts_once() -> None:
    answers = iter(
        [
            graph_error(429, "TooManyRequests", {"Retry-After": "1"}),
            httpx.Response(201, json=msg("new")),
        ]
    )
    client, recorder, _ = make_client(lambda r: next(answers))
    sent = await client.messages.send_chat_message(CHAT, "hello")
    assert sent.id == "new" and len(recorder.requests) == 2
    assert json.loads(recorder.requests[1].content) == {
        "body": {"contentType": "text", "content": "hello"}
    }


async def test_server_error_on_send_is_not_resent_and_says_the_outcome_is_unknown() -> None:
    client, recorder, slept = make_client(
        lambda r: graph_error(503, "ServiceUnavailable", {"Retry-After": "1"})
    )
    with pytest.raises(GraphServerError) as caught:
        await client.messages.send_chat_message(CHAT, "hello")
    assert caught.value.outcome_unknown and caught.value.status == 503
    assert len(recorder.requests) == 1 and slept == []


async def test_server_error_on_get_is_retried_with_backoff_until_it_succeeds() -> None:
    answers = iter(
        [
            graph_error(500, "InternalServerError"),
            graph_error(502, "BadGateway"),
            httpx.Response(200, json={"id": "me"}),
        ]
    )
    client, recorder, slept = make_client(lambda r: next(answers))
    me = await client.directory.get_me()
    assert me.id == "me" and len(recorder.requests) == 3
    assert len(slept) == 2 and all(d > 0 for d in slept)


async def test_persistent_server_error_on_get_gives_up_after_the_bounded_attempts() -> None:
    client, recorder, _ = make_client(lambda r: graph_error(500, "InternalServerError"))
    with pytest.raises(GraphServerError) as caught:
        await client.directory.get_me()
    assert not caught.value.outcome_unknown and len(recorder.requests) == RetryPolicy().max_attempts


async def test_unauthorized_refreshes_the_token_once_and_retries_once() -> None:
    tokens = CountingTokens()
    answers = iter(
        [graph_error(401, "InvalidAuthenticationToken"), httpx.Response(200, json={"id": "me"})]
    )
    client, recorder, _ = make_client(lambda r: next(answers), tokens=tokens)
    assert (await client.directory.get_me()).id == "me"
    assert tokens.invalidated == ["token-1"]
    assert [r.headers["Authorization"] for r in recorder.requests] == [
        "Bearer token-1",
        "Bearer token-2",
    ]


async def test_unauthorized_after_the_refresh_is_an_auth_error() -> None:
    tokens = CountingTokens()
    client, recorder, _ = make_client(
        lambda r: graph_error(401, "InvalidAuthenticationToken"), tokens=tokens
    )
    with pytest.raises(GraphAuthError):
        await client.directory.get_me()
    assert len(recorder.requests) == 2 and tokens.issued == 2


async def test_lost_answer_on_send_is_not_resent() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    client, recorder, _ = make_client(handler)
    with pytest.raises(GraphConnectionError) as caught:
        await client.messages.send_chat_message(CHAT, "hello")
    assert caught.value.outcome_unknown and len(recorder.requests) == 1


async def test_refused_connection_on_send_is_retried_because_nothing_left() -> None:
    attempts: Iterator[httpx.ConnectError | httpx.Response] = iter(
        [httpx.ConnectError("refused"), httpx.Response(201, json=msg("new"))]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        answer = next(attempts)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client, recorder, _ = make_client(handler)
    assert (await client.messages.send_chat_message(CHAT, "hello")).id == "new"
    assert len(recorder.requests) == 2


@pytest.mark.parametrize(("status", "error"), [(400, GraphBadRequest), (404, GraphNotFound)])
async def test_client_errors_map_to_typed_errors_with_code_and_request_id(
    status: int, error: type[GraphError]
) -> None:
    client, recorder, _ = make_client(lambda r: graph_error(status, "SomeCode"))
    with pytest.raises(error) as caught:
        await client.chats.get_chat(CHAT)
    assert (
        caught.value.status == status
        and caught.value.code == "SomeCode"
        and caught.value.request_id == "rid-1"
    )
    assert len(recorder.requests) == 1


async def test_metrics_use_route_templates_never_raw_ids() -> None:
    metrics = Metrics()
    client, _, _ = make_client(lambda r: page([msg("m1")]), metrics=metrics)
    async for _ in client.messages.list_chat_messages(CHAT, since=None):
        pass
    await client.chats.list_chat_members(CHAT)
    routes = {
        s.labels["route"]
        for family in metrics.registry.collect()
        if family.name == "entrabot_graph_requests"
        for s in family.samples
    }
    assert routes == {"chats/{id}/messages", "chats/{id}/members"}


async def test_chat_sweep_keeps_the_pages_read_before_a_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        n = int(request.url.params.get("p", "1"))
        if n == 3:
            return graph_error(403, "Forbidden")
        return page([chat(f"c{n}")], next_link=f"{BASE}/me/chats?p={n + 1}")

    client, _, _ = make_client(handler)
    chats, complete = await client.chats.list_my_chats()
    assert [c.id for c in chats] == ["c1", "c2"] and complete is False


async def test_chat_sweep_failing_on_the_first_page_raises() -> None:
    client, _, _ = make_client(lambda r: graph_error(403, "Forbidden"))
    with pytest.raises(GraphForbidden):
        await client.chats.list_my_chats()


async def test_chat_sweep_at_the_page_cap_is_incomplete() -> None:
    client, recorder, _ = make_client(
        lambda r: page([chat("c")], next_link=f"{BASE}/me/chats?more=1")
    )
    chats, complete = await client.chats.list_my_chats(max_pages=3)
    assert len(chats) == 3 and complete is False and len(recorder.requests) == 3
    assert "$expand=lastMessagePreview,members" in str(recorder.requests[0].url)


async def test_unreadable_newest_message_is_an_error_not_an_empty_chat() -> None:
    client, _, _ = make_client(lambda r: page([{"id": "m1", "messageType": "message"}]))
    with pytest.raises(GraphPayloadError):
        await client.messages.get_newest_chat_message(CHAT)


async def test_empty_chat_has_no_newest_message() -> None:
    client, recorder, _ = make_client(lambda r: page([]))
    assert await client.messages.get_newest_chat_message(CHAT) is None
    assert "$top=1" in str(recorder.requests[0].url)


async def test_non_json_answer_is_a_payload_error() -> None:
    client, _, _ = make_client(lambda r: httpx.Response(200, text="<html>proxy login</html>"))
    with pytest.raises(GraphPayloadError):
        await client.directory.get_me()


async def test_create_chat_binds_members_to_the_configured_graph() -> None:
    client, recorder, _ = make_client(lambda r: httpx.Response(201, json=chat("19:new")))
    created = await client.chats.create_chat("group", ["agent", "o'brien"], topic="Plans")
    assert created.id == "19:new"
    body = json.loads(recorder.requests[0].content)
    assert body["chatType"] == "group" and body["topic"] == "Plans"
    assert [m["user@odata.bind"] for m in body["members"]] == [
        f"{BASE}/users('agent')",
        f"{BASE}/users('o%27%27brien')",
    ]


async def test_send_mail_posts_a_message_with_recipients() -> None:
    client, recorder, _ = make_client(lambda r: httpx.Response(202))
    await client.mail.send_mail(["ada@contoso.com"], "Subject", "Body")
    request = recorder.requests[0]
    assert request.url.path == "/v1.0/me/sendMail"
    message = json.loads(request.content)["message"]
    assert message["toRecipients"] == [{"emailAddress": {"address": "ada@contoso.com"}}]
    assert message["body"] == {"contentType": "Text", "content": "Body"}


async def test_send_mail_carries_copies_and_custom_headers_and_a_5xx_is_not_repeated() -> None:
    client, recorder, _ = make_client(
        lambda r: graph_error(503, "ServiceUnavailable", {"Retry-After": "1"})
    )
    with pytest.raises(GraphServerError) as failed:
        await client.mail.send_mail(
            ["ada@contoso.com"],
            "S",
            "B",
            cc=["grace@fabrikam.com"],
            headers={"x-entrabot-send-id": "abc"},
        )
    assert failed.value.outcome_unknown and len(recorder.requests) == 1
    message = json.loads(recorder.requests[0].content)["message"]
    assert message["ccRecipients"] == [{"emailAddress": {"address": "grace@fabrikam.com"}}]
    assert message["internetMessageHeaders"] == [{"name": "x-entrabot-send-id", "value": "abc"}]


@pytest.mark.parametrize("kind", ["reply", "replyAll"])
async def test_a_reply_posts_the_comment_and_headers_to_the_messages_action(kind: str) -> None:
    client, recorder, _ = make_client(lambda r: httpx.Response(202))
    await client.mail.answer_mail("AAMk/1=", kind, "Thanks", headers={"x-entrabot-send-id": "r1"})  # type: ignore[arg-type]
    request = recorder.requests[0]
    assert (
        request.method == "POST"
        and request.url.raw_path.decode() == f"/v1.0/me/messages/AAMk%2F1%3D/{kind}"
    )
    assert json.loads(request.content) == {
        "comment": "Thanks",
        "message": {"internetMessageHeaders": [{"name": "x-entrabot-send-id", "value": "r1"}]},
    }
    with pytest.raises(ValueError, match="takes no recipients"):
        await client.mail.answer_mail("AAMk1", kind, "x", to=["a@b.c"])  # type: ignore[arg-type]


async def test_a_forward_names_its_recipients() -> None:
    client, recorder, _ = make_client(lambda r: httpx.Response(202))
    await client.mail.answer_mail("AAMk1", "forward", "FYI", to=["auditor@fabrikam.com"])
    assert json.loads(recorder.requests[0].content) == {
        "comment": "FYI",
        "toRecipients": [{"emailAddress": {"address": "auditor@fabrikam.com"}}],
    }
    with pytest.raises(ValueError, match="at least one recipient"):
        await client.mail.answer_mail("AAMk1", "forward", "FYI")


async def test_a_shared_mailbox_is_read_at_its_users_path() -> None:
    client, recorder, _ = make_client(lambda r: page([]))
    pages = client.mail.list_mail(None, top=5, mailbox="support@contoso.com")
    assert [p.items async for p in pages] == [()]
    assert (
        recorder.requests[0].url.path
        == "/v1.0/users/support@contoso.com/mailFolders/inbox/messages"
    )


async def test_a_429_holds_every_later_request_of_the_client_until_its_retry_after() -> None:
    # Graph's limits are per app and a throttled request counts against them: the replica's other
    # reads must wait too, or they keep the window full.
    answers = iter(
        [
            graph_error(429, "TooManyRequests", {"Retry-After": "120"}),
            httpx.Response(200, json={"id": "u-1", "userPrincipalName": "a@b.c"}),
        ]
    )
    client, recorder, slept = make_client(
        lambda r: next(answers), retry_policy=RetryPolicy(max_retry_after=60)
    )
    with pytest.raises(GraphThrottled):
        await client.directory.get_me()  # beyond the cap: not retried by this call...
    assert slept == []
    await client.directory.get_me()  # ...but the next call waits (capped) before it sends anything
    assert slept == [60.0] and len(recorder.requests) == 2


async def test_a_saved_chats_page_link_off_the_graph_origin_is_refused_before_any_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return page([])

    client, recorder, _ = make_client(handler)
    with pytest.raises(GraphPayloadError, match="leaves the Graph origin"):
        await client.chats.my_chats_page("https://evil.test/v1.0/me/chats?$skiptoken=1")
    with pytest.raises(GraphPayloadError, match="leaves the Graph origin"):
        async for _ in client.chats.my_chats_pages(
            max_pages=1, start="https://evil.test/v1.0/me/chats?$skiptoken=2"
        ):
            pass
    assert recorder.requests == []


async def test_a_reaction_is_posted_as_graphs_set_reaction_waits_out_a_429_and_is_never_resent_after_a_5xx() -> (
    None
):
    answers = iter(
        [
            graph_error(429, "TooManyRequests", {"Retry-After": "1"}),
            httpx.Response(204),
            graph_error(503, "ServiceUnavailable"),
        ]
    )
    client, recorder, _ = make_client(lambda r: next(answers))
    await client.messages.set_chat_message_reaction(CHAT, "1764", "👀")
    assert (
        len(recorder.requests) == 2
    )  # the 429 was not carried out: sent again after its Retry-After
    request = recorder.requests[1]
    assert request.method == "POST" and request.url.path.endswith(
        f"/chats/{CHAT}/messages/1764/setReaction"
    )
    assert json.loads(request.content) == {"reactionType": "👀"}
    with pytest.raises(GraphServerError):
        await client.messages.set_chat_message_reaction(CHAT, "1765", "👀")
    assert len(recorder.requests) == 3
