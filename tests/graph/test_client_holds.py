"""The client-wide hold after Graph says "later" (429 or 5xx), the probe after it, and the fleet's hold.

Over httpx.MockTransport with a clock that the recorded sleeps move forward, so every hold is read off
what the client slept, never off the wall clock.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import httpx
import pytest

from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphServerError
from service.graph.options import GraphOptions
from service.graph.pacing import PacingRules
from service.graph.retry_policy import RetryPolicy
from service.telemetry.metrics import GraphMetrics, Metrics
from tests.graph.test_client_rules import NOW, CountingTokens, Handler, Recorder, graph_error

BASE = "https://graph.test/v1.0"
ME = {"id": "u-1", "userPrincipalName": "a@b.c"}
ONE_ATTEMPT = RetryPolicy(
    max_attempts=1
)  # the call reports at once, so the next call shows the hold


@dataclass
class MovingClock:
    now: float = NOW
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class RecordingHold:
    """A SharedHold: what the client announced, and a fleet hold to hand it."""

    until: float = 0.0
    announced: list[tuple[float, int, str]] = field(default_factory=list)

    def held_until(self) -> float:
        return self.until

    def announce(self, until: float, status: int, route: str) -> None:
        self.announced.append((until, status, route))


def client_on(
    handler: Handler,
    clock: MovingClock,
    *,
    policy: RetryPolicy = ONE_ATTEMPT,
    metrics: Metrics | None = None,
    shared: RecordingHold | None = None,
) -> tuple[GraphClient, Recorder]:
    recorder = Recorder(handler)
    client = GraphClient(
        GraphOptions(BASE, retry=policy),
        CountingTokens(),
        http=httpx.AsyncClient(transport=httpx.MockTransport(recorder)),
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(1),
        metrics=(metrics or Metrics()).graph,
        shared_hold=shared,
    )
    return client, recorder


def answers(*responses: httpx.Response) -> Handler:
    queue = list(responses)
    return lambda request: queue.pop(0)


def ok() -> httpx.Response:
    return httpx.Response(200, json=ME)


async def test_a_503_with_retry_after_holds_every_later_request_until_then() -> None:
    clock = MovingClock()
    metrics = Metrics()
    client, recorder = client_on(
        answers(graph_error(503, "ServiceUnavailable", {"Retry-After": "30"}), ok()),
        clock,
        metrics=metrics,
    )
    with pytest.raises(GraphServerError):
        await client.directory.get_me()
    assert clock.slept == []
    await (
        client.directory.get_me()
    )  # another call, not a retry: it waits out the 503's Retry-After before sending
    assert clock.slept == [30.0] and len(recorder.requests) == 2
    assert (
        metrics.registry.get_sample_value("entrabot_graph_holds_total", {"cause": "unavailable"})
        == 1
    )


@pytest.mark.parametrize("status", [502, 503, 504, 429])
async def test_overload_without_retry_after_holds_briefly_growing_to_a_cap_and_resets_on_an_answer(
    status: int,
) -> None:
    clock = MovingClock()
    failure = graph_error(status, "Overloaded")  # no Retry-After
    client, _ = client_on(answers(*[failure] * 7, ok(), failure, ok()), clock)
    for _ in range(7):
        with pytest.raises(GraphError):
            await client.directory.get_me()
    rules = PacingRules()
    # Each hold is slept before the next call; equal jitter keeps each in [step/2, step].
    steps = [min(rules.backoff_cap_s, rules.backoff_base_s * 2**i) for i in range(6)]
    assert len(clock.slept) == 6
    assert all(step / 2 <= slept <= step for slept, step in zip(clock.slept, steps, strict=True))
    assert max(clock.slept) <= rules.backoff_cap_s
    await client.directory.get_me()  # sleeps the 7th hold, then Graph answers: the count resets
    with pytest.raises(GraphError):
        await client.directory.get_me()
    await client.directory.get_me()
    assert rules.backoff_base_s / 2 <= clock.slept[-1] <= rules.backoff_base_s


async def test_a_500_without_retry_after_holds_nobody() -> None:
    clock = MovingClock()
    client, recorder = client_on(answers(graph_error(500, "InternalServerError"), ok()), clock)
    with pytest.raises(GraphServerError):
        await client.directory.get_me()
    await client.directory.get_me()
    assert clock.slept == [] and len(recorder.requests) == 2


async def test_a_retrying_call_sleeps_once_for_its_own_delay_and_the_hold() -> None:
    clock = MovingClock()
    client, recorder = client_on(
        answers(graph_error(503, "ServiceUnavailable", {"Retry-After": "5"}), ok()),
        clock,
        policy=RetryPolicy(),
    )
    await client.directory.get_me()
    assert clock.slept == [5.0] and len(recorder.requests) == 2


async def test_only_a_hold_graph_asked_for_is_announced_to_the_fleet() -> None:
    clock = MovingClock()
    shared = RecordingHold()
    client, _ = client_on(
        answers(
            graph_error(503, "ServiceUnavailable"),
            graph_error(503, "ServiceUnavailable", {"Retry-After": "7"}),
            graph_error(429, "TooManyRequests", {"Retry-After": "3"}),
        ),
        clock,
        shared=shared,
    )
    for _ in range(3):
        with pytest.raises(GraphError):
            await client.directory.get_me()
    # The backoff after the first 503 is our own guess; a Retry-After is Graph's word, for the whole fleet.
    assert [(status, route) for _, status, route in shared.announced] == [(503, "me"), (429, "me")]
    assert shared.announced[0][0] == NOW + clock.slept[0] + 7.0


async def test_a_fleet_hold_holds_the_client_and_its_directory_twin() -> None:
    clock = MovingClock()
    metrics = Metrics()
    shared = RecordingHold(until=NOW + 12.0)
    client, recorder = client_on(answers(ok(), ok()), clock, shared=shared, metrics=metrics)
    directory = client.with_tokens(CountingTokens())
    await directory.directory.get_me()
    assert clock.slept == [12.0]
    await client.directory.get_me()  # the same hold, already over: no second sleep
    assert clock.slept == [12.0] and len(recorder.requests) == 2
    assert metrics.registry.get_sample_value("entrabot_graph_holds_total", {"cause": "fleet"}) == 1


async def test_after_a_hold_one_probe_goes_first_and_the_others_wait_for_its_answer() -> None:
    # Real time here (holds of 0.1 s): the waiting requests are real tasks.
    in_flight = 0
    started_with: list[int] = []  # requests in flight when each request arrived, itself included
    statuses = iter([503, 503, 503] + [200] * 10)

    async def graph(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight
        in_flight += 1
        started_with.append(in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        status = next(statuses)
        if status == 503:
            return graph_error(503, "ServiceUnavailable", {"Retry-After": "0.1"})
        return ok()

    client = GraphClient(
        GraphOptions(BASE, retry=RetryPolicy(max_attempts=6)),
        CountingTokens(),
        http=httpx.AsyncClient(transport=httpx.MockTransport(graph)),
        metrics=GraphMetrics(),
    )
    with pytest.raises(GraphServerError):
        await client.messages.send_chat_message(
            "19:abc@thread.v2", "hi"
        )  # a POST: not retried after a 5xx
    results = await asyncio.gather(*(client.directory.get_me() for _ in range(5)))
    assert [me.id for me in results] == ["u-1"] * 5
    # While Graph failed, one request at a time went (the probes); the rest followed its success.
    assert started_with[:3] == [1, 1, 1]
    assert len(started_with) == 3 + 5
