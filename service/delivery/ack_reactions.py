"""The acknowledgement reaction: the agent user reacts to a Teams chat message its host acknowledged, so the
person who wrote it sees it arrived, as chat channels do (issue 22 item 4; ``ENTRABOT_DELIVERY_ACK_REACTION``).

A courtesy, never part of delivery. ``HostKeeper`` hands over the entries *its own* write of an
acknowledgement took out of a host's record (a compare-and-swap, so across the fleet exactly one write takes
a given entry out), after that write; ``offer`` only queues them, so the acknowledgement path never waits
on Graph. This object's loop sets the reactions one by one through the replica's ``GraphClient`` (its
throttling holds, backoff and tokens). Hence once per message at most: a replica that dies between the
acknowledgement and the reaction, a full queue, or a refusal from Graph leaves the message without one,
and nothing ever sets it twice (the call is not re-sent after a 5xx or a lost answer).

The agent's own reaction moves the message's lastModifiedDateTime, as any reaction does; the chat read
judges what is new by createdDateTime (``service.workers.chat_reading``) and an ``updated`` change
notification never hints a read, so the reaction never brings the message back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from service.delivery.host_record import PendingDelivery
from service.domain.message import MessageKey
from service.domain.source import Source
from service.graph.errors import GraphError, GraphThrottled, GraphUnavailable
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

QUEUE_CAPACITY = (
    512  # acknowledgements come in at most a few per second; past this Graph is stuck anyway
)
INTERVAL_S = 30.0  # the loop sleeps this long at most; an offer wakes it at once


class ReactionOutcome(str, Enum):
    SET = "set"
    DROPPED = "dropped"  # the queue was full: no reaction
    THROTTLED = "throttled"  # Graph said "later" past the client's retries: no reaction
    FAILED = "failed"  # Graph refused it (a 4xx: a permission, a deleted message) or no token: no reaction
    UNKNOWN = "unknown"  # a 5xx or no answer: it may or may not be set; not sent again


class SetsReactions(Protocol):
    async def set_chat_message_reaction(
        self, chat_id: str, message_id: str, reaction_type: str
    ) -> None: ...


@dataclass
class AckReactions:
    graph: SetsReactions
    reaction_type: str
    metrics: DeliveryMetrics
    capacity: int = QUEUE_CAPACITY
    _queue: deque[MessageKey] = field(default_factory=deque)
    _work: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, entries: Iterable[PendingDelivery]) -> None:
        """Entries an acknowledgement written here took out of a host's record: queue a reaction to each
        Teams chat message among them (mail has none). Never waits."""
        for entry in entries:
            if entry.message.source is not Source.CHAT:
                continue
            if len(self._queue) >= self.capacity:
                self._count(ReactionOutcome.DROPPED)
                log.warning(
                    "acknowledgement reaction dropped: the queue is full",
                    extra={
                        "chat_id": entry.message.chat_id,
                        "message_id": entry.message.message_id,
                    },
                )
                continue
            self._queue.append(entry.key)
            self._work.set()

    async def wait_for_work(self) -> None:
        await self._work.wait()

    async def cycle(self) -> None:
        """Set the queued reactions, oldest first (the supervisor runs it, woken by ``offer``)."""
        self._work.clear()
        while self._queue:
            chat_id, message_id = self._queue.popleft()
            self._count(await self._react(chat_id, message_id))

    async def _react(self, chat_id: str, message_id: str) -> ReactionOutcome:
        try:
            await self.graph.set_chat_message_reaction(chat_id, message_id, self.reaction_type)
        except GraphError as exc:
            outcome = _outcome_of(exc)
            log.warning(
                "acknowledgement reaction not set",
                extra={
                    "chat_id": chat_id,
                    "message_id": message_id,
                    "outcome": outcome.value,
                    "error": type(exc).__name__,
                    "status": exc.status,
                },
            )
            return outcome
        return ReactionOutcome.SET

    def _count(self, outcome: ReactionOutcome) -> None:
        self.metrics.ack_reactions.labels(outcome=outcome.value).inc()

    @property
    def queued(self) -> int:
        return len(self._queue)


def _outcome_of(exc: GraphError) -> ReactionOutcome:
    if isinstance(exc, GraphThrottled):
        return ReactionOutcome.THROTTLED
    if isinstance(exc, GraphUnavailable):
        return ReactionOutcome.UNKNOWN
    return ReactionOutcome.FAILED
