"""OpenTelemetry tracing: an OTLP exporter when an endpoint is configured, nothing otherwise.

Modules create spans with ``opentelemetry.trace.get_tracer(__name__)``; without a provider those are
no-ops, so tests and local runs pay nothing.

A message's trace crosses replicas through the shared container: the change hint that makes a replica
read a chat carries its writer's W3C ``traceparent`` (``traceparent_now``), and the read, claim and push
of that chat run as children of it (``context_from_traceparent``).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()


def configure_tracing(otlp_endpoint: str | None, *, replica_id: str) -> TracerProvider | None:
    """Install a provider exporting to ``otlp_endpoint`` (OTLP/HTTP); return it so shutdown can flush."""
    if not otlp_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "entrabot-fleet", "service.instance.id": replica_id}
        )
    )
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint.rstrip("/") + "/v1/traces"))
    )
    trace.set_tracer_provider(provider)
    return provider


def traceparent_now() -> str | None:
    """The current span as a W3C traceparent; None when no span is recorded (tracing off)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def context_from_traceparent(traceparent: str | None) -> Context | None:
    """A context whose parent is the span ``traceparent`` names; None when it names none (absent, or
    not a valid traceparent: the caller's own context stays the parent)."""
    if not traceparent:
        return None
    context = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    return context if trace.get_current_span(context).get_span_context().is_valid else None
