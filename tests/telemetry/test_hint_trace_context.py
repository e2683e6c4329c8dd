"""A hint carries its writer's trace through the container (LocalBackend), and the want it becomes
keeps the trace of the hint whose message the read is for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from service.ledger.fleet.hints import Hint, HintLog, HintReader, parse_hint_line
from service.storage.local import LocalBackend
from service.telemetry.tracing import context_from_traceparent
from service.workers.chat_wants import WantedRead

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


async def test_a_hint_read_back_carries_the_trace_of_the_span_that_wrote_it(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("scan") as scan:
        await HintLog(backend, clock=lambda: NOW).add([Hint("chat-1", NOW, "m1")])
    [hint] = await HintReader(backend, clock=lambda: NOW).poll() or []
    context = context_from_traceparent(hint.traceparent)
    assert context is not None
    assert (
        trace.get_current_span(context).get_span_context().trace_id
        == scan.get_span_context().trace_id
    )


def test_a_trace_field_that_is_not_a_traceparent_is_dropped_and_the_hint_kept() -> None:
    hint = parse_hint_line('{"c":"chat-1","t":"2026-12-02T12:00:00Z","s":"scan","p":5}')
    assert hint is not None and hint.traceparent is None
    garbled = parse_hint_line(
        '{"c":"chat-1","t":"2026-12-02T12:00:00Z","s":"scan","p":"00-zz-yy-01"}'
    )
    assert garbled is not None and context_from_traceparent(garbled.traceparent) is None


def test_a_merged_want_keeps_the_trace_of_the_newest_hint() -> None:
    older = Hint("chat-1", NOW, "m1", traceparent="00-" + "1" * 32 + "-" + "a" * 16 + "-01")
    newer = Hint(
        "chat-1",
        NOW + timedelta(seconds=1),
        "m2",
        traceparent="00-" + "2" * 32 + "-" + "b" * 16 + "-01",
    )
    first = WantedRead.from_hint(older, 1.0)
    assert WantedRead.from_hint(newer, 2.0).merged(first).traceparent == newer.traceparent
    assert first.merged(WantedRead.from_hint(newer, 2.0)).traceparent == newer.traceparent
    untraced = WantedRead(None, None, False, 3.0)
    assert untraced.merged(first).traceparent == older.traceparent
