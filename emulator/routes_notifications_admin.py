"""Admin controls for change notifications under /_emulator: the subscription table, lifecycle
events on demand, faults on outgoing notifications (drop, duplicate, delay, reorder), pause and
resume, the batching latency, and delivery statistics.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from emulator.context import context_of
from emulator.notification_faults import NotificationFaultRule
from emulator.timestamps import teams_time

router = APIRouter(prefix="/_emulator")


class ForceLifecycle(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: Literal["reauthorizationRequired", "subscriptionRemoved", "missed"]


class Latency(BaseModel):
    model_config = ConfigDict(extra="forbid")

    latency_ms: int = Field(ge=0, le=600_000)


@router.get("/subscriptions")
async def subscriptions(request: Request) -> dict[str, Any]:
    engine = context_of(request).subscriptions
    return {
        "subscriptions": [
            {
                "id": s.id,
                "resource": s.resource,
                "kind": s.ref.kind.value,
                "target": s.ref.target,
                "app_id": s.app_id,
                "creator_id": s.creator_id,
                "change_type": s.change_type_text,
                "notification_url": s.notification_url,
                "lifecycle_notification_url": s.lifecycle_url,
                "expiration": teams_time(s.expiration),
                "token_expiry": teams_time(s.token_expiry),
                "reauthorization_sent": s.reauthorization_sent,
            }
            for s in engine.active()
        ]
    }


@router.post("/subscriptions/{sub_id}/lifecycle")
async def force_lifecycle(sub_id: str, body: ForceLifecycle, request: Request) -> dict[str, Any]:
    engine = context_of(request).subscriptions
    engine.bind()
    return {"event": body.event, "sent": engine.force(sub_id, body.event)}


@router.get("/notifications")
async def notifications(request: Request) -> dict[str, Any]:
    engine = context_of(request).subscriptions
    return {
        "stats": engine.stats.snapshot(),
        "faults": engine.faults.describe(),
        "paused": engine.notifier.paused,
        "waiting_batches": engine.notifier.waiting,
        "latency_ms": engine.notifier.latency_ms,
        "retry_waits_s": engine.stats.retry_waits(),
    }


@router.post("/notifications/faults", status_code=201)
async def add_fault(rule: NotificationFaultRule, request: Request) -> dict[str, Any]:
    return {"id": context_of(request).subscriptions.faults.add(rule), **rule.model_dump()}


@router.delete("/notifications/faults")
async def clear_faults(request: Request) -> dict[str, int]:
    return {"cleared": context_of(request).subscriptions.faults.clear()}


@router.post("/notifications/pause")
async def pause(request: Request) -> dict[str, bool]:
    context_of(request).subscriptions.notifier.pause()
    return {"paused": True}


@router.post("/notifications/resume")
async def resume(request: Request) -> dict[str, bool]:
    context_of(request).subscriptions.notifier.resume()
    return {"paused": False}


@router.post("/notifications/latency")
async def latency(body: Latency, request: Request) -> dict[str, int]:
    context_of(request).subscriptions.notifier.latency_ms = body.latency_ms
    return {"latency_ms": body.latency_ms}


@router.post("/notifications/stats/reset")
async def reset_stats(request: Request) -> dict[str, bool]:
    context_of(request).subscriptions.stats.reset()
    return {"reset": True}
