"""The Grafana dashboard: valid against Grafana's own types (the schema generated from
@grafana/schema), querying only metrics and labels the service exports, and covering the fleet."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest

from tests.deploy.deploy_facts import CHART_DIR, DASHBOARD, GRAFANA_DIR
from tests.deploy.exported_metrics import TARGET_LABELS, exported_series

SCHEMA_DIR = GRAFANA_DIR / "schema"
# Grafana's built-in interval variables are not PromQL durations; any duration parses the same.
GRAFANA_INTERVALS = re.compile(
    r"\$__(rate_interval|interval|range)|\$\{__(rate_interval|interval|range)\}"
)
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Query:
    where: str
    expr: str


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / "dashboard.schema.json").read_text())["schemas"]


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    return exported_series()


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def all_queries(dashboard: dict[str, Any]) -> list[Query]:
    queries = [
        Query(f"panel {p['title']!r} {t['refId']}", t["expr"])
        for p in all_panels(dashboard)
        for t in p.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            text = (
                variable["query"]["query"]
                if isinstance(variable["query"], dict)
                else variable["query"]
            )
            match = LABEL_VALUES.match(text)
            assert match is not None, (
                f"variable {variable['name']}: only label_values(...) queries are used"
            )
            if match.group("selector"):
                queries.append(Query(f"variable {variable['name']}", match.group("selector")))
    return queries


def parse(query: Query) -> promql_parser.Expr:
    try:
        return promql_parser.parse(GRAFANA_INTERVALS.sub("5m", query.expr))
    except ValueError as exc:
        pytest.fail(f"{query.where}: not PromQL ({exc}): {query.expr}")


def selected_metrics(expr: promql_parser.Expr) -> list[str]:
    names: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name or next(
                (m.value for m in node.matchers.matchers if m.name == "__name__"), None
            )
            names.append(name or "<no metric name>")

    promql_parser.walk(expr, visit)
    return names


def test_dashboard_is_valid_for_grafana_dashboard_schema(
    dashboard: dict[str, Any], schemas: dict[str, Any]
) -> None:
    jsonschema.validate(dashboard, schemas["Dashboard"])
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            jsonschema.validate(panel, schemas["RowPanel"])
            continue
        jsonschema.validate(panel, schemas["Panel"])
        if panel["type"] == "timeseries":
            jsonschema.validate(panel["options"], schemas["TimeSeriesOptions"])
            jsonschema.validate(
                panel["fieldConfig"]["defaults"].get("custom", {}), schemas["TimeSeriesFieldConfig"]
            )
        elif panel["type"] == "stat":
            jsonschema.validate(panel["options"], schemas["StatOptions"])
        else:
            pytest.fail(
                f"panel {panel['title']!r}: type {panel['type']} has no options schema; add it to types.ts"
            )


def test_schema_rejects_a_misspelt_dashboard_field(
    dashboard: dict[str, Any], schemas: dict[str, Any]
) -> None:
    broken = {**dashboard, "refersh": "30s"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schemas["Dashboard"])


def test_every_query_reads_only_metrics_the_service_exports(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    unknown = [
        (q.where, name)
        for q in all_queries(dashboard)
        for name in selected_metrics(parse(q))
        if name not in exported
    ]
    assert unknown == []


def test_every_grouping_and_matcher_label_exists_on_the_selected_metrics(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    problems: list[str] = []
    for query in all_queries(dashboard):

        def visit(node: object, query: Query = query) -> None:
            if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
                available = (
                    set().union(*(exported.get(n, set()) for n in selected_metrics(node.expr)))
                    | TARGET_LABELS
                )
                problems.extend(
                    f"{query.where}: no label {label!r}"
                    for label in node.modifier.labels
                    if label not in available
                )
            if isinstance(node, promql_parser.VectorSelector) and node.name in exported:
                problems.extend(
                    f"{query.where}: {node.name} has no label {m.name!r}"
                    for m in node.matchers.matchers
                    if m.name not in exported[node.name] | TARGET_LABELS | {"__name__"}
                )

        promql_parser.walk(parse(query), visit)
    assert problems == []


def test_label_names_check_catches_a_label_the_metric_lacks(exported: dict[str, set[str]]) -> None:
    assert "route" not in exported["entrabot_deliveries_total"] | TARGET_LABELS
    assert {"channel", "source", "outcome"} <= exported["entrabot_deliveries_total"]
    assert "le" in exported["entrabot_delivery_latency_seconds_bucket"]


def test_dashboard_shows_what_operators_of_the_fleet_need(dashboard: dict[str, Any]) -> None:
    used = {name for q in all_queries(dashboard) for name in selected_metrics(parse(q))}
    needed = {
        "entrabot_deliveries_total",
        "entrabot_claims_total",
        "entrabot_cas_conflicts_total",
        "entrabot_delivery_latency_seconds_bucket",
        "entrabot_graph_requests_total",
        "entrabot_graph_throttles_total",
        "entrabot_blob_operation_seconds_bucket",
        "entrabot_mcp_sessions",
        "entrabot_push_streams",
        "entrabot_email_hold",
        "entrabot_loop_up",
        "entrabot_loop_lag_seconds",
        "entrabot_chat_unsettled",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "entrabot_mcp_http_requests_total",
        "entrabot_mcp_http_request_duration_seconds_bucket",
    }
    assert needed - used == set()
    quantiles = [
        q.expr
        for q in all_queries(dashboard)
        if "entrabot_delivery_latency_seconds_bucket" in q.expr
    ]
    assert quantiles and all(e.startswith("histogram_quantile(") for e in quantiles)


def test_per_replica_panels_group_by_pod(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard):
        if panel["title"] in ("MCP sessions per replica", "Push streams per replica"):
            assert all("by (pod)" in t["expr"] for t in panel["targets"]), panel["title"]


def test_panels_have_unique_ids_and_fit_the_24_column_grid(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard))
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    for panel in panels:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", (
                f"{panel['title']}: query the chosen data source"
            )


def test_chart_ships_the_canonical_dashboard() -> None:
    shipped = CHART_DIR / "dashboards" / DASHBOARD.name
    assert shipped.read_bytes() == DASHBOARD.read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_committed_schema_is_what_the_pinned_grafana_types_generate(tmp_path: Path) -> None:
    if not (SCHEMA_DIR / "node_modules" / "ts-json-schema-generator").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=SCHEMA_DIR,
            check=True,
            timeout=300,
        )
    regenerated = tmp_path / "dashboard.schema.json"
    subprocess.run(
        ["node", "generate.mjs", str(regenerated)], cwd=SCHEMA_DIR, check=True, timeout=300
    )
    assert regenerated.read_bytes() == (SCHEMA_DIR / "dashboard.schema.json").read_bytes()
