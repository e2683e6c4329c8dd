"""The retry decisions: which outcomes are retried, after how long, and which are handed back."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from service.graph.retry_policy import (
    Action,
    Attempt,
    RetryPolicy,
    Step,
    backoff_delay,
    next_step,
    parse_retry_after,
)

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc).timestamp()
POLICY = RetryPolicy(max_attempts=4, max_retry_after=60.0)


def decide(
    status: int | None,
    *,
    idempotent: bool = True,
    sent: bool = True,
    attempt: int = 1,
    refreshed: bool = False,
    retry_after: str | None = None,
) -> Step:
    return next_step(
        Attempt(attempt, idempotent, request_sent=sent, refreshed=refreshed),
        status=status,
        retry_after_header=retry_after,
        now=NOW,
        policy=POLICY,
        rng=random.Random(7),
    )


def test_retry_after_in_seconds_is_read() -> None:
    assert parse_retry_after("7", NOW) == 7.0
    assert parse_retry_after(" 0 ", NOW) == 0.0


def test_retry_after_as_http_date_is_read_against_the_clock() -> None:
    assert parse_retry_after("Fri, 20 Nov 2026 12:00:30 GMT", NOW) == 30.0


def test_retry_after_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Fri, 20 Nov 2026 11:59:00 GMT", NOW) == 0.0


def test_unusable_retry_after_is_ignored() -> None:
    for value in (None, "", "soon", "-5", "1e9", "Fri, 99 Nov 2026"):
        assert parse_retry_after(value, NOW) is None, value


def test_throttled_call_waits_exactly_retry_after_then_retries() -> None:
    assert decide(429, retry_after="3") == Step(Action.RETRY, delay=3.0, retry_after=3.0)


def test_throttled_post_is_retried_because_graph_refused_it_unprocessed() -> None:
    assert decide(429, idempotent=False, retry_after="2").action is Action.RETRY


def test_retry_after_beyond_the_cap_is_handed_back_not_slept() -> None:
    step = decide(429, retry_after="Fri, 20 Nov 2026 12:05:00 GMT")
    assert step.action is Action.DONE and step.retry_after == 300.0


def test_throttling_gives_up_after_the_bounded_attempts() -> None:
    assert decide(429, attempt=POLICY.max_attempts, retry_after="1").action is Action.DONE


def test_throttled_without_retry_after_backs_off() -> None:
    step = decide(429)
    assert step.action is Action.RETRY and 0 < step.delay <= POLICY.backoff_base


def test_server_error_on_get_is_retried_with_backoff() -> None:
    step = decide(503)
    assert step.action is Action.RETRY and step.delay > 0


def test_server_error_on_post_is_never_resent() -> None:
    for status in (500, 502, 503, 504):
        assert decide(status, idempotent=False, retry_after="1").action is Action.DONE


def test_server_errors_stop_after_the_bounded_attempts() -> None:
    assert decide(500, attempt=POLICY.max_attempts).action is Action.DONE


def test_lost_answer_is_retried_for_get_but_not_for_a_sent_post() -> None:
    assert decide(None).action is Action.RETRY
    assert decide(None, idempotent=False, sent=True).action is Action.DONE


def test_post_whose_connection_never_opened_is_retried() -> None:
    assert decide(None, idempotent=False, sent=False).action is Action.RETRY


def test_unauthorized_refreshes_once_then_reports() -> None:
    assert decide(401).action is Action.REFRESH
    assert decide(401, refreshed=True).action is Action.DONE


def test_client_errors_and_success_are_handed_back() -> None:
    for status in (200, 201, 204, 400, 403, 404, 409):
        assert decide(status).action is Action.DONE


@given(
    attempt=st.integers(min_value=1, max_value=30), seed=st.integers(min_value=0, max_value=2**32)
)
def test_backoff_grows_with_jitter_and_never_exceeds_the_cap(attempt: int, seed: int) -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_cap=8.0)
    step = min(policy.backoff_cap, policy.backoff_base * 2 ** (attempt - 1))
    delay = backoff_delay(attempt, policy, random.Random(seed))
    assert step / 2 <= delay <= step <= policy.backoff_cap
