"""Each layer imports only the layers below it: the tools never reach into the workers' modules."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service"


def imported_modules(package: str) -> set[str]:
    """Every module imported anywhere under ``service/<package>`` (a package directory or a module)."""
    root = SERVICE / package
    names: set[str] = set()
    for path in (root.rglob("*.py") if root.is_dir() else [root]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return names


def test_the_tools_do_not_import_the_workers() -> None:
    assert sorted(m for m in imported_modules("tools") if m.startswith("service.workers")) == []


def test_the_lower_layers_do_not_import_the_workers_the_tools_or_mcp() -> None:
    for package in ("domain", "delivery", "ledger", "storage", "graph"):
        modules = imported_modules(package)
        upward = sorted(m for m in modules if m.startswith(("service.workers", "service.tools", "service.mcp")))
        assert upward == [], package


def test_the_clock_depends_on_nothing_in_the_service() -> None:
    assert sorted(m for m in imported_modules("clock.py") if m.startswith("service")) == []


def test_the_one_source_enum_depends_on_nothing_in_the_service() -> None:
    # delivery, ledger, notifications and tools all spell "chat or mail" with it: it must stay a leaf.
    assert sorted(m for m in imported_modules("domain/source.py") if m.startswith("service")) == []
