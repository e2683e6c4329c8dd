"""An OTLP/HTTP trace receiver on loopback for tests: what a collector would be handed, decoded.

OTLP/HTTP is a POST of a protobuf ``ExportTraceServiceRequest`` to ``/v1/traces`` (the exporter the
service configures in service.telemetry.tracing); the decoding is opentelemetry-proto's, the server a
real uvicorn (service.devstack.uvicorn_runner).
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.devstack.uvicorn_runner import serve_app

PROTOBUF = "application/x-protobuf"


def _value(value: AnyValue) -> str | bool | int | float:
    kind = value.WhichOneof("value")
    return (
        getattr(value, kind)
        if kind in ("string_value", "bool_value", "int_value", "double_value")
        else str(value)
    )


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as W3C traceparent spells it
    span_id: str
    parent_span_id: str  # "" for a root
    links: tuple[tuple[str, str], ...]  # (trace_id, span_id) of each link
    attributes: dict[str, str | bool | int | float]
    replica: str  # the exporting process's service.instance.id


@dataclass
class OtlpReceiver:
    base_url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def ancestors(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        """The span's parents received so far, nearest first (stops where a parent is not here)."""
        by_id = {s.span_id: s for s in self.trace(span.trace_id)}
        chain: list[ReceivedSpan] = []
        current = by_id.get(span.parent_span_id)
        while current is not None and current not in chain:
            chain.append(current)
            current = by_id.get(current.parent_span_id)
        return chain

    def take(self, request: ExportTraceServiceRequest) -> None:
        self.requests += 1
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                            {a.key: _value(a.value) for a in span.attributes},
                            str(resource.get("service.instance.id", "")),
                        )
                    )


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    """A receiver listening on loopback until the block exits; its ``base_url`` is the OTLP endpoint."""
    receiver = OtlpReceiver()

    async def traces(request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if request.headers.get("content-type") != PROTOBUF:
            return Response("only OTLP/HTTP protobuf is decoded here", status_code=415)
        receiver.take(ExportTraceServiceRequest.FromString(body))
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    async with serve_app(app) as server:
        receiver.base_url = server.base_url
        yield receiver
