"""A replica's Prometheus counters as plain numbers, and the difference between two scrapes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

SampleKey = tuple[str, frozenset[tuple[str, str]]]


@dataclass(frozen=True)
class MetricsScrape:
    samples: Mapping[SampleKey, float]

    def value(self, name: str, **labels: str) -> float:
        """The sum of every sample called ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    def by_label(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """``name`` summed per value of ``label`` (e.g. claims per outcome)."""
        wanted = set(labels.items())
        out: dict[str, float] = {}
        for (n, ls), v in self.samples.items():
            if n == name and wanted <= ls:
                key = dict(ls).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out

    def quantile(self, name: str, q: float, **labels: str) -> float | None:
        """The ``q`` quantile of histogram ``name`` (its ``_bucket`` samples whose labels include ``labels``,
        summed), interpolated inside its bucket as Prometheus' histogram_quantile does; None when empty."""
        buckets = self.by_label(f"{name}_bucket", "le", **labels)
        bounds = sorted((float(le), count) for le, count in buckets.items())
        if not bounds or bounds[-1][1] <= 0:
            return None
        rank = q * bounds[-1][1]
        lower_bound, lower_count = 0.0, 0.0
        for bound, count in bounds:
            if count >= rank:
                if bound == float("inf"):
                    return lower_bound
                inside = count - lower_count
                return lower_bound + (bound - lower_bound) * (
                    (rank - lower_count) / inside if inside else 1.0
                )
            lower_bound, lower_count = bound, count
        return lower_bound

    def minus(self, earlier: MetricsScrape) -> MetricsScrape:
        """Counter increases since ``earlier`` (gauges come out as their change, which is what a window wants)."""
        keys = set(self.samples) | set(earlier.samples)
        return MetricsScrape(
            {k: self.samples.get(k, 0.0) - earlier.samples.get(k, 0.0) for k in keys}
        )


def combined(scrapes: list[MetricsScrape]) -> MetricsScrape:
    """The samples of several replicas' scrapes added up (counters and histogram buckets sum)."""
    total: dict[SampleKey, float] = {}
    for one in scrapes:
        for key, value in one.samples.items():
            total[key] = total.get(key, 0.0) + value
    return MetricsScrape(total)


def parse_metrics(text: str) -> MetricsScrape:
    samples: dict[SampleKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return MetricsScrape(samples)


async def scrape(http: httpx.AsyncClient, base_url: str) -> MetricsScrape:
    response = await http.get(f"{base_url}/metrics", timeout=10)
    response.raise_for_status()
    return parse_metrics(response.text)
