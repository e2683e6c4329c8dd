"""The service's Prometheus metrics, one group per area of the service.

``Metrics`` builds every group on one registry (a replica's, or a test's own), and each component takes
only the group it counts in, always given: nothing is process-global and two apps in one test process
never collide. Label values are small closed sets, never ids or text (SPEC §7).
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Info, ProcessCollector

from service import __version__

from service.telemetry.metrics.io import GraphMetrics, McpMetrics, StorageMetrics
from service.telemetry.metrics.ledger import LedgerMetrics, RoleMetrics
from service.telemetry.metrics.work import ChangeMetrics, DeliveryMetrics, LoopMetrics

__all__ = [
    "ChangeMetrics",
    "DeliveryMetrics",
    "GraphMetrics",
    "LedgerMetrics",
    "LoopMetrics",
    "McpMetrics",
    "Metrics",
    "RoleMetrics",
    "StorageMetrics",
]


class Metrics:
    """Every group on one registry: what a replica (or a test) wires, handing each part its group."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # CPU seconds, resident memory and open file descriptors of this process (process_*), read
        # from /proc on Linux; elsewhere the collector exports nothing.
        ProcessCollector(registry=self.registry)
        # entrabot_build_info{version, python} 1: which build a replica runs, for dashboards and for
        # telling a rollout's old replicas from its new ones.
        Info("entrabot_build", "The build this replica runs", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self.mcp = McpMetrics(self.registry)
        self.ledger = LedgerMetrics(self.registry)
        self.roles = RoleMetrics(self.registry)
        self.changes = ChangeMetrics(self.registry)
        self.delivery = DeliveryMetrics(self.registry)
        self.graph = GraphMetrics(self.registry)
        self.storage = StorageMetrics(self.registry)
        self.loops = LoopMetrics(self.registry)
