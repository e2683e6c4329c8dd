"""What to do after one Graph attempt: hand the answer back, retry after a delay, or refresh the token.

A pure decision over the attempt's outcome, so every rule is unit-tested without a server or a clock.

Which failures may be retried, and why:
- 429 on any method: Graph's throttling rejects a request before any workload sees it, so even a
  POST (a chat message) is safe to send again once ``Retry-After`` has passed.
- 5xx on a GET: reading twice is harmless; bounded exponential backoff with jitter, so replicas
  that failed together do not retry together.
- 5xx on a POST: never re-sent. Graph documents no guarantee that a 500/502/503/504 was refused
  before processing (503 comes from the workloads too, and a gateway timeout says nothing about the
  backend), so a re-sent message could post twice. The caller gets the error with
  ``outcome_unknown`` and decides.
- No response at all: retried for a GET; for a POST only when the connection was never made (the
  request cannot have reached Graph).
- 401: the token was refused; invalidate it, fetch a fresh one and send once more.
"""

from __future__ import annotations

import enum
import random
import re
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime

_DELAY_SECONDS = re.compile(r"^\d{1,9}(\.\d{1,6})?$")


class Action(enum.Enum):
    DONE = "done"  # hand this response (or its error) to the caller
    RETRY = "retry"  # wait ``Step.delay`` seconds, then send again
    REFRESH = "refresh"  # invalidate the token, then send again at once


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4  # sends per call, not counting the one after a token refresh
    max_retry_after: float = 60.0  # the longest a call waits for a 429's Retry-After
    backoff_base: float = 0.5
    backoff_cap: float = 8.0


@dataclass(frozen=True)
class Step:
    action: Action
    delay: float = 0.0
    retry_after: float | None = None  # the server's Retry-After, parsed, when it sent one


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date); None if unusable."""
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.match(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - now)


def backoff_delay(attempt: int, policy: RetryPolicy, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": half the step fixed, half random."""
    step = min(policy.backoff_cap, policy.backoff_base * (2.0 ** max(0, attempt - 1)))
    return step / 2 + rng.uniform(0, step / 2)


@dataclass(frozen=True)
class Attempt:
    """One send of a call, as the rules see it."""

    number: int  # 1-based; the resend after a token refresh is not a retry and keeps its number
    idempotent: bool
    request_sent: bool = (
        True  # False when the connection was never made (the request cannot have arrived)
    )
    refreshed: bool = False  # the call already refreshed its token once


def next_step(
    attempt: Attempt,
    *,
    status: int | None,
    retry_after_header: str | None,
    now: float,
    policy: RetryPolicy,
    rng: random.Random,
) -> Step:
    """The decision after ``attempt`` ended with ``status`` (None: no response)."""
    retry_after = parse_retry_after(retry_after_header, now)
    if status == 401:
        return Step(Action.DONE) if attempt.refreshed else Step(Action.REFRESH)
    attempts_left = attempt.number < policy.max_attempts
    if status == 429:
        if not attempts_left or (retry_after is not None and retry_after > policy.max_retry_after):
            # Retrying before the server's time only prolongs the throttling: report it and let the
            # caller's loop come back later.
            return Step(Action.DONE, retry_after=retry_after)
        delay = (
            retry_after if retry_after is not None else backoff_delay(attempt.number, policy, rng)
        )
        return Step(Action.RETRY, delay=delay, retry_after=retry_after)
    if status is not None and status >= 500:
        if not (attempt.idempotent and attempts_left):
            return Step(Action.DONE, retry_after=retry_after)
        if retry_after is not None and retry_after <= policy.max_retry_after:
            return Step(Action.RETRY, delay=retry_after, retry_after=retry_after)
        return Step(Action.RETRY, delay=backoff_delay(attempt.number, policy, rng))
    if status is None:
        if attempts_left and (attempt.idempotent or not attempt.request_sent):
            return Step(Action.RETRY, delay=backoff_delay(attempt.number, policy, rng))
        return Step(Action.DONE)
    return Step(Action.DONE)
