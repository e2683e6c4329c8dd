"""Traces for poll cycles, claims, Graph and blob calls; log lines without tokens or message bodies."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.storage.blob import BlobBackend
from service.telemetry.logging import configure_logging
from service.telemetry.tracing import configure_tracing

pytestmark = pytest.mark.azurite

SECRET_BODY = "wire 40,000 EUR to account 1234"


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """The process's tracer provider (set once; the service's tracers are proxies that follow it)."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(
        build_seed(chats=1, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    ) as e:
        yield e


@pytest.fixture
def backend(blob_backend: BlobBackend) -> BlobBackend:
    return blob_backend


def test_no_otlp_endpoint_installs_no_exporter() -> None:
    assert configure_tracing(None, replica_id="r1") is None


async def test_a_poll_cycle_traces_the_cycle_the_claim_graph_and_blob_calls(
    spans, emulator, backend
) -> None:
    from worker_stack import RecordingTarget, build_stack

    stack = await build_stack(emulator, backend, is_cloud=True)
    try:
        stack.hub.register(RecordingTarget())
        await stack.discovery.cycle()
        await stack.chats.cycle()
        emulator.state.post_message(
            emulator.seed.chats[0].id, sender_id=emulator.seed.humans[0].id, content="hi"
        )
        spans.clear()
        await stack.chats.cycle()
    finally:
        await stack.aclose()
    names = {s.name for s in spans.get_finished_spans()}
    assert "chat_poll.cycle" in names and "ledger.claim_delivery" in names
    assert any(n.startswith("blob.") for n in names)
    assert any("chats/{id}/messages" in n for n in names), names


async def test_log_lines_carry_ids_never_bodies_or_tokens(emulator, backend) -> None:
    from worker_stack import RecordingTarget, build_stack

    stream = io.StringIO()
    configure_logging("DEBUG", replica_id="r-log", stream=stream)
    try:
        stack = await build_stack(emulator, backend, is_cloud=True)
        try:
            stack.hub.register(RecordingTarget())
            await stack.discovery.cycle()
            await stack.chats.cycle()
            emulator.state.post_message(
                emulator.seed.chats[0].id, sender_id=emulator.seed.humans[0].id, content=SECRET_BODY
            )
            await stack.chats.cycle()
            delivered = stack.hub.live_targets()[0].received  # type: ignore[attr-defined]
        finally:
            await stack.aclose()
    finally:
        logging.getLogger().handlers.clear()
    assert [m.body for m in delivered][-1] == SECRET_BODY
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    assert lines and all(line.get("replica") == "r-log" for line in lines)
    text = stream.getvalue()
    assert SECRET_BODY not in text and "eyJ" not in text and "blueprint-dev-secret" not in text


def test_teams_chat_ids_stay_readable_while_session_ids_in_the_sdks_lines_and_target_ids_do_not() -> (
    None
):
    from service.telemetry.logging import RedactingFilter, session_ref  # noqa: PLC0415

    session = uuid.uuid4().hex
    chat = f"19:{uuid.uuid4().hex}@thread.v2"  # the shape of a real Teams group chat id
    ours = logging.LogRecord(
        "service.workers.chat_poll", logging.WARNING, __file__, 1, "chat poll failed", None, None
    )
    ours.chat_id, ours.target_id = chat, f"push:{session}"
    sdk = logging.LogRecord(
        "mcp.server.streamable_http_manager",
        logging.INFO,
        __file__,
        1,
        "Created new transport with session ID: %s",
        (session,),
        None,
    )
    for record in (ours, sdk):
        RedactingFilter().filter(record)
    assert (
        vars(ours)["chat_id"] == chat
    )  # the fields a log call's extra= sets, which LogRecord does not declare
    assert vars(ours)["target_id"] == f"push:{session_ref(session)}"
    assert sdk.getMessage() == f"Created new transport with session ID: {session_ref(session)}"


def test_uvicorns_coloured_copy_of_a_message_stays_out_of_the_json_line() -> None:
    stream = io.StringIO()
    configure_logging("INFO", replica_id="r-colour", stream=stream)
    try:
        # How uvicorn logs an access or start-up line: the plain message, and a coloured copy in extra.
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on %s",
            "http://127.0.0.1:1",
            extra={"color_message": "Uvicorn running on \x1b[1m%s\x1b[0m"},
        )
    finally:
        logging.getLogger().handlers.clear()
    [line] = [json.loads(x) for x in stream.getvalue().splitlines() if "Uvicorn running" in x]
    assert line["message"] == "Uvicorn running on http://127.0.0.1:1"
    assert "color_message" not in line and "\x1b" not in stream.getvalue()
