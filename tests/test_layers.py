"""Each layer imports only the layers below it: the tools never reach into the workers' modules."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service"


def imported_modules(package: str) -> set[str]:
    """Every module imported anywhere under ``service/<package>`` (a package directory or a module)."""
    root = SERVICE / package
    names: set[str] = set()
    for path in root.rglob("*.py") if root.is_dir() else [root]:
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
        upward = sorted(
            m for m in modules if m.startswith(("service.workers", "service.tools", "service.mcp"))
        )
        assert upward == [], package


def test_the_clock_depends_on_nothing_in_the_service() -> None:
    assert sorted(m for m in imported_modules("clock.py") if m.startswith("service")) == []


def test_the_one_source_enum_depends_on_nothing_in_the_service() -> None:
    # delivery, ledger, notifications and tools all spell "chat or mail" with it: it must stay a leaf.
    assert sorted(m for m in imported_modules("domain/source.py") if m.startswith("service")) == []


def module_imports() -> dict[str, set[str]]:
    """Each service module's imports of other service modules, as a graph."""
    graph: dict[str, set[str]] = {}
    for path in SERVICE.rglob("*.py"):
        parts = path.relative_to(SERVICE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("service")
            ):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("service"))
        graph[name] = found
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from ``start`` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        module, path = stack.pop()
        for imported in sorted(graph.get(module, ())):
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_the_chat_poll_parts_import_one_way() -> None:
    # The poll was split by concept (issue 25): the book, the read, the claim and the reader seam sit
    # below the poll, and no part reaches back up to it or round to another through a third.
    graph = module_imports()
    workers = sorted(m for m in graph if m.startswith("service.workers."))
    assert "service.workers.conversation_reader" in workers
    assert {m: c for m in workers if (c := cycle_through(graph, m)) is not None} == {}
    parts = (
        "chat_book",
        "chat_reading",
        "chat_claiming",
        "chat_state",
        "chat_wants",
        "conversation_reader",
    )
    for part in parts:
        assert "service.workers.chat_poll" not in graph[f"service.workers.{part}"], part
