"""The hand-over of claimed messages to the hub's targets: each to exactly one, oldest first.

A claimed message whose target did not take it is offered to the next live target that accepts it;
it is lost only when none is left (it stays readable through the read tools). One whose target may
have taken it (``Handover.IN_DOUBT``) stays with that target: reported, never offered again, so no
host sees it twice. One reserved for an acknowledging host goes to that host's target or waits in
its record, never to another host.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from opentelemetry import trace

from service.delivery.choice import delivery_order
from service.delivery.deliveries import Deliveries
from service.delivery.targets import DeliveryTarget, Dispatch, DispatchOutcome, Handover
from service.domain.message import InboundMessage
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


class Targets(Protocol):
    """The hub, as the hand-over sees it."""

    metrics: DeliveryMetrics
    deliveries: Deliveries

    def choose_for(
        self, message: InboundMessage, *, exclude: set[str], first_try: bool
    ) -> DeliveryTarget | None: ...

    def host_target(self, host_id: str) -> DeliveryTarget | None: ...

    def stick(self, message: InboundMessage, target_id: str) -> None: ...


async def hand_over(hub: Targets, messages: Sequence[InboundMessage]) -> list[Dispatch]:
    results: list[Dispatch] = []
    for message in sorted(messages, key=delivery_order):
        with tracer.start_as_current_span(
            "delivery.push",
            attributes={
                "entrabot.source": message.source.value,
                "entrabot.chat_id": message.chat_id,
                "entrabot.message_id": message.message_id,
            },
        ) as span:
            host = hub.deliveries.reserved_for(message)
            if host is not None:
                dispatch = await _to_host(hub, message, host)
            else:
                dispatch = await _to_a_target(hub, message)
            span.set_attribute("entrabot.delivery.outcome", dispatch.outcome.value)
        results.append(dispatch)
    return results


async def _to_a_target(hub: Targets, message: InboundMessage) -> Dispatch:
    target = hub.choose_for(message, exclude=set(), first_try=True)
    hub.deliveries.claim(message)  # the allotment, if any, is used up
    tried: set[str] = set()
    while target is not None:
        tried.add(target.target_id)
        handover = await _hand(target, message)
        if handover is Handover.NOT_TAKEN:
            _count(hub, message, target.kind.value, "failed")
            target = hub.choose_for(message, exclude=tried, first_try=False)
            continue
        hub.deliveries.handed_over(message)  # never allotted or offered again
        channel = target.kind.value
        if handover is Handover.IN_DOUBT:
            _count(hub, message, channel, DispatchOutcome.IN_DOUBT.value)
            log.warning(
                "claimed message may or may not have reached its target; offered to no other",
                extra={**_ids(message), "target_id": target.target_id},
            )
            return Dispatch(message, DispatchOutcome.IN_DOUBT, target.target_id, channel)
        hub.stick(message, target.target_id)
        _count(hub, message, channel, DispatchOutcome.DELIVERED.value)
        return Dispatch(message, DispatchOutcome.DELIVERED, target.target_id, channel)
    _count(hub, message, "none", DispatchOutcome.NO_TARGET.value)
    log.warning("claimed message had no live target", extra=_ids(message))
    return Dispatch(message, DispatchOutcome.NO_TARGET)


async def _to_host(hub: Targets, message: InboundMessage, host: str) -> Dispatch:
    """A message in ``host``'s delivery record: that host's target here takes it, or it waits in the
    record for the host's next session (on any replica). Offered to no other host."""
    hub.deliveries.handed_over(message)
    target = hub.host_target(host)
    handover = await _hand(target, message) if target is not None else Handover.NOT_TAKEN
    if target is None or handover is Handover.NOT_TAKEN:
        _count(hub, message, "push", DispatchOutcome.PENDING.value)
        return Dispatch(message, DispatchOutcome.PENDING, None, "push")
    _count(hub, message, target.kind.value, DispatchOutcome.PUSHED.value)
    return Dispatch(message, DispatchOutcome.PUSHED, target.target_id, target.kind.value)


async def _hand(target: DeliveryTarget, message: InboundMessage) -> Handover:
    try:
        return await target.deliver(message)
    except Exception:  # a broken target must not stop the others' deliveries
        log.exception("delivery target failed", extra={"target_id": target.target_id})
        return Handover.NOT_TAKEN


def _count(hub: Targets, message: InboundMessage, channel: str, outcome: str) -> None:
    hub.metrics.deliveries.labels(channel, message.source.value, outcome).inc()


def _ids(message: InboundMessage) -> dict[str, str]:
    return {"chat_id": message.chat_id, "message_id": message.message_id}
