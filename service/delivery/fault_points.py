"""Test-only crash points on the delivery path: the replica SIGKILLs itself where it is told to.

``ENTRABOT_TEST_KILL_AT=<point>`` (``after_intent`` or ``after_claim``) makes the replica kill itself
the first time it reaches that point with a message owed to an acknowledging host, with no cleanup, as
a node failure would. Unset (always, outside the tests) it does nothing. It lives in the environment,
not in the settings, so no configuration file can turn it on by mistake.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger(__name__)

KILL_AT_ENV = "ENTRABOT_TEST_KILL_AT"


class FaultPoint(str, Enum):
    AFTER_INTENT = (
        "after_intent"  # the host's record holds the intent; the claim is not written yet
    )
    AFTER_CLAIM = "after_claim"  # the claim landed; nothing pushed yet


@dataclass
class FaultPoints:
    kill_at: FaultPoint | None = None
    kill: Callable[[], None] = lambda: os.kill(os.getpid(), signal.SIGKILL)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FaultPoints:
        value = environ.get(KILL_AT_ENV, "").strip()
        if not value:
            return cls()
        try:
            return cls(FaultPoint(value))
        except ValueError:
            names = ", ".join(p.value for p in FaultPoint)
            raise ValueError(
                f"{KILL_AT_ENV}={value!r} is not a fault point; use one of: {names}"
            ) from None

    def reached(self, point: FaultPoint) -> None:
        if self.kill_at is point:
            log.warning(
                "test fault point reached: killing this replica", extra={"point": point.value}
            )
            for handler in logging.getLogger().handlers:
                handler.flush()
            self.kill()
