"""The channel-detection benchmark's pure parts: what a Graph request was for, the fleet's load from
the emulator's records (people's requests and the token endpoint left out), and the flatness ratio."""

from __future__ import annotations

from typing import Any

from bench.channel_detection import flatness
from bench.channel_traffic import RouteGroup, graph_load, route_group
from emulator.stats import RequestRecord

FLEET_APP = "fleet-app"
HUMANS_APP = "humans-app"


def _record(route: str, status: int = 200, app_id: str = FLEET_APP) -> RequestRecord:
    return RequestRecord(
        "GET", route, route, status, app_id, None, 0.0, "2026-12-06T00:00:00Z", 1.0, False, False
    )


def test_routes_are_grouped_by_what_they_read() -> None:
    assert route_group("/v1.0/teams/{id}/channels/{id}/messages/delta") is RouteGroup.CHANNEL_DELTA
    assert route_group("/v1.0/teams/{id}/channels/{id}/messages") is RouteGroup.CHANNEL_MESSAGES
    assert (
        route_group("/v1.0/teams/{id}/channels/{id}/messages/{id}/replies")
        is RouteGroup.CHANNEL_MESSAGES
    )
    assert route_group("/v1.0/me/joinedTeams") is RouteGroup.TEAMS_LISTING
    assert route_group("/v1.0/teams/{id}/channels") is RouteGroup.TEAMS_LISTING
    assert route_group("/v1.0/chats/{id}/messages") is RouteGroup.CHAT_MESSAGES
    assert route_group("/v1.0/me/chats") is RouteGroup.CHAT_LISTING
    assert route_group("/v1.0/me") is RouteGroup.OTHER


def test_the_fleets_load_leaves_out_peoples_requests_and_the_token_endpoint() -> None:
    records = [
        _record("/v1.0/teams/{id}/channels/{id}/messages/delta"),
        _record("/v1.0/teams/{id}/channels/{id}/messages/delta", status=429),
        _record("/v1.0/me/joinedTeams"),
        _record("/v1.0/chats/{id}/messages"),
        _record("/v1.0/chats/{id}/messages", app_id=HUMANS_APP),
        _record("/{tenant}/oauth2/v2.0/token"),
    ]
    load = graph_load(records, HUMANS_APP, 2.0).as_dict()
    assert load["requests"] == 4
    assert load["channel_requests_per_s"] == 1.5
    assert load["per_s_by_group"]["channel_delta"] == 1.0
    assert load["throttled_429"] == 1
    assert load["throttled_429_by_group"] == {"channel_delta": 1}


def _step(replicas: int, idle_channel: float, busy_channel: float) -> dict[str, Any]:
    def graph(channel: float) -> dict[str, Any]:
        return {"channel_requests_per_s": channel, "requests_per_s": channel, "throttled_429": 0}

    return {
        "replicas": replicas,
        "idle": graph(idle_channel),
        "busy": {"graph": graph(busy_channel)},
    }


def test_flatness_compares_the_most_replicas_with_the_fewest() -> None:
    f = flatness([_step(3, 1.05, 3.0), _step(1, 1.0, 1.0)])
    assert f["replicas"] == [3, 1]
    assert f["idle_channel_load_ratio"] == 1.05 and f["idle_flat"]
    assert f["busy_channel_load_ratio"] == 3.0 and not f["busy_flat"]
    assert not f["any_429"]
