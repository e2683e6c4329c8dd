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

    def minus(self, earlier: MetricsScrape) -> MetricsScrape:
        """Counter increases since ``earlier`` (gauges come out as their change, which is what a window wants)."""
        keys = set(self.samples) | set(earlier.samples)
        return MetricsScrape({k: self.samples.get(k, 0.0) - earlier.samples.get(k, 0.0) for k in keys})


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
