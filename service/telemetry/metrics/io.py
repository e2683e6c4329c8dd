"""The metric groups of what the service talks to: Graph, Blob, and its own MCP face."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.telemetry.metrics.buckets import HTTP_BUCKETS, IO_BUCKETS


class GraphMetrics:
    """Requests to Microsoft Graph and the tokens they carry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.graph_requests = Counter(
            "entrabot_graph_requests",
            "Graph requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.graph_throttles = Counter(
            "entrabot_graph_throttles", "Graph 429 answers by route", ["route"], registry=r
        )
        self.graph_holds = Counter(
            "entrabot_graph_holds",
            "Holds of every Graph request of this replica, by cause: throttled (429 with "
            "Retry-After), unavailable (5xx with Retry-After), backoff (429/502/503/504 without), fleet (another "
            "replica's, read from the shared backoff)",
            ["cause"],
            registry=r,
        )
        self.graph_malformed_items = Counter(
            "entrabot_graph_malformed_items",
            "Graph items skipped as unreadable, by kind",
            ["kind"],
            registry=r,
        )
        self.token_requests = Counter(
            "entrabot_token_requests",
            "Token endpoint requests by hop and outcome",
            ["hop", "outcome"],
            registry=r,
        )


class StorageMetrics:
    """Blob operations."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.blob_operations = Counter(
            "entrabot_blob_operations",
            "Storage operations by op, outcome and area (the key's first path segment: "
            "chat_cursors, deliveries, leases…; container for the container's own)",
            ["op", "outcome", "area"],
            registry=r,
        )
        self.blob_latency = Histogram(
            "entrabot_blob_operation_seconds",
            "Storage operation latency by op and area (as for entrabot_blob_operations_total)",
            ["op", "area"],
            buckets=IO_BUCKETS,
            registry=r,
        )


class McpMetrics:
    """The MCP server's HTTP face and its sessions."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        # HTTP, for /mcp (labels: method, status class; the path is fixed so none is recorded).
        self.mcp_http_requests = Counter(
            "entrabot_mcp_http_requests",
            "HTTP requests to /mcp by method and status class",
            ["method", "status"],
            registry=r,
        )
        self.mcp_http_duration = Histogram(
            "entrabot_mcp_http_request_duration_seconds",
            "Time from a /mcp request to its response's start",
            ["method"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.mcp_http_in_flight = Gauge(
            "entrabot_mcp_http_in_flight",
            "/mcp requests being handled (GET streams included)",
            registry=r,
        )
        self.sessions = Gauge(
            "entrabot_mcp_sessions",
            "MCP sessions the SDK holds on this replica (a host gone without closing its session "
            "stays until the idle timeout; entrabot_mcp_hosts counts only those still there)",
            registry=r,
        )
        self.hosts = Gauge(
            "entrabot_mcp_hosts",
            "Hosts connected to this replica by kind: push (a push host with its stream open), "
            "tools (any other session that has not gone away); a host whose stream closed without "
            "a request since counts as gone at once",
            ["kind"],
            registry=r,
        )
