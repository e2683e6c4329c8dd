"""The fleet's Graph load as a fleet run reports it: the replicas' requests in the window, by route."""

from __future__ import annotations

import pytest

from emulator.stats import RECENT_LIMIT, RequestRecord
from service.devstack.graph_load import graph_load

PEOPLE = "people-app"
FLEET = "fleet-app"


def record(
    at: float,
    *,
    route: str = "/v1.0/chats/{id}/messages",
    status: int = 200,
    app: str = FLEET,
    method: str = "GET",
    path: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        method=method,
        route=route,
        path=path or route.replace("{id}", "c1"),
        status=status,
        app_id=app,
        user_id=None,
        monotonic=at,
        wall="",
        duration_ms=1.0,
        fault=False,
        throttled=status == 429,
    )


def test_only_the_replicas_graph_requests_inside_the_window_count() -> None:
    records = [
        record(9.0),  # before the window
        record(10.0),
        record(11.0, status=429),
        record(12.0, app=PEOPLE, method="POST"),  # the people's own post: another app's budget
        record(
            13.0, route="/common/oauth2/v2.0/token", path="/common/oauth2/v2.0/token", method="POST"
        ),
        record(16.0, route="/v1.0/me/chats"),
        record(20.0),  # the window ends before it
    ]
    load = graph_load(records, people_app_id=PEOPLE, start=10.0, end=20.0)
    assert load.by_route == {
        "GET /v1.0/chats/{id}/messages": {"200": 1, "429": 1},
        "GET /v1.0/me/chats": {"200": 1},
    }
    assert load.requests == 3 and load.throttled == 1
    assert load.rate_by_route() == {"GET /v1.0/chats/{id}/messages": 0.2, "GET /v1.0/me/chats": 0.1}
    assert load.throttled_by(5.0) == {"0": 1}
    assert load.complete


def test_a_full_log_that_begins_after_the_window_is_reported_incomplete() -> None:
    # The emulator keeps the most recent RECENT_LIMIT requests: a full log may have dropped older ones.
    full = [record(12.0 + i / RECENT_LIMIT) for i in range(RECENT_LIMIT)]
    assert not graph_load(full, people_app_id=PEOPLE, start=10.0, end=20.0).complete
    assert graph_load(full[1:], people_app_id=PEOPLE, start=10.0, end=20.0).complete


def test_an_empty_window_is_refused() -> None:
    with pytest.raises(ValueError, match="must end after it starts"):
        graph_load([], people_app_id=PEOPLE, start=10.0, end=10.0)
