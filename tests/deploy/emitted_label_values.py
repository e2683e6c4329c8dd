"""The values the service gives the labels alerts match on, read from the code that sets them.

A value comes from the enum the service passes (``Outcome.X.value``) or from a string literal in the
module that sets the label: assigned to a variable named like the label, or passed where a parameter
named like the label is (``self._count(message, channel, "failed")``). Renaming an outcome in the
service changes what this returns, so an alert still matching the old name fails its test.
"""

from __future__ import annotations

import ast
import inspect
import re
from enum import Enum
from pathlib import Path
from types import ModuleType

from service.delivery import handover, host_keeper, host_stats, targets
from service.ledger.claims import chat_claim_types, chat_claims, email_claims
from service.ledger.summary import production as summary_production
from service.mcp import sessions
from service.storage import blob
from tests.deploy.deploy_facts import REPO_ROOT

SERIES_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def family(series: str) -> str:
    """The metric family of a sample name (``entrabot_claims_total`` -> ``entrabot_claims``)."""
    return next((series.removesuffix(s) for s in SERIES_SUFFIXES if series.endswith(s)), series)


def enum_values(*enums: type[Enum]) -> frozenset[str]:
    return frozenset(str(member.value) for enum in enums for member in enum)


def literal_values(module: ModuleType, label: str) -> frozenset[str]:
    """String literals the module gives ``label``: assigned to a variable of that name, or passed as
    the argument of a parameter of that name (positionally or by keyword)."""
    tree = ast.parse(inspect.getsource(module))
    positions: dict[str, int] = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [a.arg for a in function.args.args if a.arg not in ("self", "cls")]
            if label in names:
                positions[function.name] = names.index(label)
    found: set[str] = set()

    def literal(node: ast.expr) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == label for t in node.targets
        ):
            literal(node.value)
        elif isinstance(node, ast.Call):
            name = (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            if name in positions and len(node.args) > positions[name]:
                literal(node.args[positions[name]])
            for keyword in node.keywords:
                if keyword.arg == label:
                    literal(keyword.value)
    return frozenset(found)


def _bucket_names(module: ModuleType) -> frozenset[str]:
    """The keys of the dict literal ``buckets = {...}`` a module fills (the pending deliveries' ages)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "buckets" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            found |= {
                k.value
                for k in node.value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    return frozenset(found)


def emitted_label_values() -> dict[tuple[str, str], frozenset[str]]:
    """(metric family, label) -> every value the service sets it to."""
    return {
        ("entrabot_claims", "ledger"): frozenset(
            {chat_claims.LEDGER, email_claims.LEDGER, summary_production.LEDGER}
        ),
        ("entrabot_claims", "outcome"): enum_values(
            chat_claim_types.ChatClaimOutcome,
            email_claims.EmailCycleOutcome,
            summary_production.SummaryOutcome,
        ),
        ("entrabot_deliveries", "outcome"): enum_values(targets.DispatchOutcome)
        | literal_values(handover, "outcome")
        | literal_values(host_stats, "outcome"),
        ("entrabot_pending_deliveries", "age"): literal_values(host_keeper, "age")
        | _bucket_names(host_stats),
        ("entrabot_mcp_hosts", "kind"): enum_values(sessions.HostKind),
        # blob._OUTCOMES maps storage errors to their labels; outcome_label falls back to "error".
        ("entrabot_blob_operations", "outcome"): frozenset(label for _, label in blob._OUTCOMES)
        | literal_values(blob, "outcome")
        | {blob.outcome_label(Exception())},
    }


# Which modules set each family's labels: the table above reads them, and a new one must join it.
LABEL_SOURCES = {
    "claims": (chat_claims, email_claims, summary_production),
    "deliveries": (handover, host_stats),
    "pending_deliveries": (host_keeper,),
    "blob_operations": (blob,),
    "hosts": (sessions,),
}


def modules_setting(metric_attribute: str) -> set[str]:
    """The service modules that call ``<metrics>.<metric_attribute>.labels(...)``."""
    pattern = re.compile(rf"\.{metric_attribute}\.labels\(")
    return {
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / "service").rglob("*.py")
        if pattern.search(path.read_text())
    }


def module_path(module: ModuleType) -> str:
    return str(Path(inspect.getfile(module)).resolve().relative_to(REPO_ROOT))
