"""Summaries of measured samples: percentiles of one run, medians of repeated runs, rates and ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    """Order statistics of one run's samples (seconds, bytes… whatever the samples are in)."""

    count: int
    min: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None

    def as_dict(self, digits: int = 3) -> dict[str, Any]:
        return {
            k: (round(v, digits) if isinstance(v, float) else v) for k, v in asdict(self).items()
        }


def percentile(samples: Sequence[float], q: int) -> float | None:
    """The ``q``-th percentile (1–99), interpolated between order statistics; None without samples."""
    if not samples:
        return None
    if len(samples) == 1:
        return float(samples[0])
    # "inclusive": the sample's own min and max bound the percentiles (the samples are the population).
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        return Summary(0, None, None, None, None, None, None)
    return Summary(
        count=len(samples),
        min=float(min(samples)),
        p50=percentile(samples, 50),
        p95=percentile(samples, 95),
        p99=percentile(samples, 99),
        max=float(max(samples)),
        mean=statistics.fmean(samples),
    )


def median_of_runs(values: Sequence[float]) -> dict[str, Any]:
    """The median of repeated runs with its spread, so a single outlier run is visible, not hidden."""
    if not values:
        return {"runs": 0, "median": None, "min": None, "max": None, "values": []}
    return {
        "runs": len(values),
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "values": [round(v, 3) for v in values],
    }


def ratio(numerator: float, denominator: float, digits: int = 2) -> float | None:
    """``numerator / denominator``, or None when the denominator is zero (nothing to compare)."""
    return round(numerator / denominator, digits) if denominator else None
