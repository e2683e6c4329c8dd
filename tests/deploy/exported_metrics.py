"""Every series a fresh ``Metrics()`` can expose, with its label names: what dashboards and alerts may read."""

from __future__ import annotations

from service.telemetry.metrics import Metrics

# Labels Prometheus adds to every scraped series (compose relabels `pod`; Kubernetes adds it).
TARGET_LABELS = frozenset(
    {"job", "instance", "pod", "namespace", "service", "container", "endpoint"}
)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("", "_sum", "_count", "_created"),
}


def exported_series() -> dict[str, set[str]]:
    """Sample name -> its label names."""
    series: dict[str, set[str]] = {}
    metrics = Metrics()
    # prometheus-client publishes no accessor for a metric's label names; `_labelnames` is the
    # attribute it has kept since 0.4. Families are read from the public collect().
    labels_by_family = {
        m._name: set(m._labelnames)
        for group in vars(metrics).values()
        for m in vars(group).values()
        if hasattr(m, "_labelnames")
    }
    for family in metrics.registry.collect():
        labels = labels_by_family.get(family.name, set())
        for suffix in SUFFIXES.get(family.type, ("",)):
            series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series
