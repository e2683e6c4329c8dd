"""Histogram buckets shared by the metric groups."""

from __future__ import annotations

LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)
# Time to the response's first byte: /mcp POSTs answer within a tool call; GET streams start at once.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
IO_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
