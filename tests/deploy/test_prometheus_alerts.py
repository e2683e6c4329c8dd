"""deploy/prometheus/alerts.yml: valid rules, each alert unit-tested by promtool (firing and quiet), and
every expression reading only metrics, labels and label values the service exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from service.ledger.claims.email_claims import EmailCycleOutcome
from tests.deploy.deploy_facts import PROMETHEUS_ALERTS, PROMETHEUS_CONFIG
from tests.deploy.emitted_label_values import (
    LABEL_SOURCES,
    emitted_label_values,
    family,
    module_path,
    modules_setting,
)
from tests.deploy.exported_metrics import TARGET_LABELS, exported_series

RULE_TESTS = Path(__file__).parent / "prometheus_rules" / "alerts_test.yml"
NEEDED_ALERTS = {
    "EntrabotNoReadyReplica",
    "EntrabotLoopCrashed",
    "EntrabotClaimsFailing",
    "EntrabotEmailHoldTooLong",
    "EntrabotChatCursorUnreadable",
    "EntrabotGraphThrottled",
    "EntrabotBlobErrors",
    "EntrabotPushFailures",
    "EntrabotDeliveryLatencyHigh",
    "EntrabotFleetRoleVacant",
    "EntrabotDeliveriesUnacknowledged",
    "EntrabotMessagesWaitWithNoHost",
}
promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="Debian's prometheus (promtool) is not installed: run deploy/docker/ci-setup.sh",
)


def rules() -> list[dict[str, Any]]:
    return [
        rule
        for group in yaml.safe_load(PROMETHEUS_ALERTS.read_text())["groups"]
        for rule in group["rules"]
    ]


def rule_tests() -> list[dict[str, Any]]:
    return yaml.safe_load(RULE_TESTS.read_text())["tests"]


@promtool
def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run(
        ["promtool", "check", "rules", str(PROMETHEUS_ALERTS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@promtool
def test_every_alert_behaves_as_its_promtool_unit_tests_say() -> None:
    result = subprocess.run(
        ["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_fleet_has_every_alert_operators_asked_for() -> None:
    assert {rule["alert"] for rule in rules()} == NEEDED_ALERTS


def test_every_alert_is_tested_both_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in rule_tests():
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing == NEEDED_ALERTS
    assert quiet == NEEDED_ALERTS


def test_alerts_read_only_metrics_and_labels_the_service_exports() -> None:
    exported = exported_series()
    for rule in rules():
        problems: list[str] = []

        def visit(node: object, rule: dict[str, Any] = rule) -> None:
            if isinstance(node, promql_parser.VectorSelector):
                if node.name not in exported:
                    problems.append(f"{node.name} is not exported")
                    return
                for matcher in node.matchers.matchers:
                    if matcher.name not in exported[node.name] | TARGET_LABELS:
                        problems.append(f"{node.name} has no label {matcher.name}")
            if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
                for label in node.modifier.labels:
                    if label not in set().union(*exported.values()) | TARGET_LABELS:
                        problems.append(f"no exported metric has the label {label}")

        promql_parser.walk(promql_parser.parse(rule["expr"]), visit)
        assert problems == [], f"{rule['alert']}: {problems}"


def matched_values(expr: str) -> list[tuple[str, str, str]]:
    """(metric family, label, value) for every value a selector of ``expr`` matches a service label on;
    a regex must be a plain alternation (``a|b|c``), so each of its words is such a value."""
    found: list[tuple[str, str, str]] = []

    def visit(node: object) -> None:
        if not isinstance(node, promql_parser.VectorSelector):
            return
        for matcher in node.matchers.matchers:
            if matcher.name in TARGET_LABELS or matcher.name == "__name__":
                continue
            if matcher.op in (promql_parser.MatchOp.Re, promql_parser.MatchOp.NotRe):
                assert re.fullmatch(r"\w+(\|\w+)*", matcher.value), (
                    f"{matcher.value!r} is not an alternation of words"
                )
                words = matcher.value.split("|")
            else:
                words = [matcher.value]
            found.extend((family(node.name or ""), matcher.name, word) for word in words)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_alerts_match_only_label_values_the_service_emits() -> None:
    emitted = emitted_label_values()
    for rule in rules():
        for metric, label, value in matched_values(rule["expr"]):
            assert (metric, label) in emitted, (
                f"{rule['alert']}: {metric}{{{label}}}: add where the service sets it to emitted_label_values.py"
            )
            assert value in emitted[metric, label], (
                f"{rule['alert']}: the service never sets {metric}{{{label}={value!r}}}"
            )


def test_the_alerts_unit_tests_feed_only_label_values_the_service_emits() -> None:
    emitted = emitted_label_values()
    for case in rule_tests():
        for series in case["input_series"]:
            for metric, label, value in matched_values(series["series"]):
                if (metric, label) in emitted:
                    assert value in emitted[metric, label], (
                        f"{series['series']}: the service never sets {label}={value!r}"
                    )


def test_the_label_values_are_read_from_every_module_that_sets_those_labels() -> None:
    for attribute, modules in LABEL_SOURCES.items():
        assert modules_setting(attribute) == {module_path(m) for m in modules}, attribute


def test_claims_failing_counts_the_email_cycles_that_fail() -> None:
    [rule] = [r for r in rules() if r["alert"] == "EntrabotClaimsFailing"]
    failing = {value for _, label, value in matched_values(rule["expr"]) if label == "outcome"}
    assert EmailCycleOutcome.FAILED.value in failing


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and len(rule["annotations"]["description"]) > 40, (
            rule["alert"]
        )


def test_compose_prometheus_loads_the_rules_file() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == [PROMETHEUS_ALERTS.name]
