"""OpenTelemetry tracing: an OTLP exporter when an endpoint is configured, nothing otherwise.

Modules create spans with ``opentelemetry.trace.get_tracer(__name__)``; without a provider those are
no-ops, so tests and local runs pay nothing.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def configure_tracing(otlp_endpoint: str | None, *, replica_id: str) -> TracerProvider | None:
    """Install a provider exporting to ``otlp_endpoint`` (OTLP/HTTP); return it so shutdown can flush."""
    if not otlp_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": "entrabot-fleet", "service.instance.id": replica_id})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint.rstrip("/") + "/v1/traces")))
    trace.set_tracer_provider(provider)
    return provider
