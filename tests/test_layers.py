"""The packages are floors: each imports only the floors below it, and nothing imports in a circle.

Read from the code's own imports (every ``import`` and ``from … import`` in ``service/``, wherever it
stands, a function's body included), so a new module is held to its floor the day it is written.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service"

# Bottom first. A package may import its own floor's other packages only where no cycle comes of it
# (asserted below); never a floor above its own. ``service`` itself is the package face (the version).
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"service", "clock", "background", "domain"}),
    frozenset({"telemetry"}),
    frozenset({"config"}),
    frozenset({"storage", "graph"}),
    frozenset({"ledger"}),
    frozenset({"delivery", "signin"}),
    frozenset({"mcp", "notifications", "workers", "tools", "bridge"}),
    # The composition root: builds the objects from the settings and hands them down. ``doctor`` is
    # here, not with the services: it builds each part from the settings to check it.
    frozenset(
        {
            "wiring",
            "replica",
            "replica_clients",
            "replica_build",
            "serve",
            "app",
            "cli",
            "devstack",
            "chat_repair",
            "from_settings",
            "doctor",
        }
    ),
)
# Who may read Settings: the root (and config, which defines them).
READS_SETTINGS = FLOORS[-1] | {"config"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SERVICE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = SERVICE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(tree: ast.AST) -> Iterator[str]:
    """The service modules a module imports (``from service import config`` names the module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "service")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "service":
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if is_module(submodule) else node.module


@cache
def module_imports() -> dict[str, frozenset[str]]:
    """Each service module's imports of other service modules."""
    return {
        module_name(path): frozenset(imported(ast.parse(path.read_text())))
        for path in sorted(SERVICE.rglob("*.py"))
    }


def top_package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_of(module: str) -> str:
    """The folder a module stands in (``service.ledger.claims`` for its modules), or the module itself
    where it is a module of ``service`` (``service.replica``)."""
    path = SERVICE.parent.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return module
    parent = module.rsplit(".", 1)[0]
    return module if parent == "service" else parent


def floor(package: str) -> int:
    [level] = [i for i, names in enumerate(FLOORS) if package in names]
    return level


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, names in module_imports().items():
        for name in names:
            a, b = package_of(module), package_of(name)
            # A folder's face (its __init__) and the modules below it are one package.
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                graph.setdefault(a, set()).add(b)
    return graph


def test_every_package_has_a_floor() -> None:
    packages = {top_package(m) for m in module_imports()}
    assert sorted(p for p in packages if not any(p in names for names in FLOORS)) == []


def test_no_package_imports_a_floor_above_its_own() -> None:
    upward = sorted(
        f"{module} -> {name}"
        for module, names in module_imports().items()
        for name in names
        if floor(top_package(name)) > floor(top_package(module))
    )
    assert upward == []


def test_no_packages_import_in_a_circle() -> None:
    top: dict[str, set[str]] = {}
    for module, names in module_imports().items():
        for name in names:
            if top_package(module) != top_package(name):
                top.setdefault(top_package(module), set()).add(top_package(name))
    assert cycles(top) == []
    # Folders within a package too (the ledger's subpackages: claims, roles, memory).
    assert cycles(package_graph()) == []


def test_no_modules_import_in_a_circle() -> None:
    graph = {m: set(names) - {m} for m, names in module_imports().items()}
    assert cycles(graph) == []


def test_domain_and_the_clock_import_nothing_else_from_the_service() -> None:
    for package in ("domain", "clock"):
        found = {
            name
            for module, names in module_imports().items()
            if top_package(module) == package
            for name in names
            if top_package(name) != package
        }
        assert sorted(found) == [], package


def test_config_imports_only_the_domain() -> None:
    found = {
        name
        for module, names in module_imports().items()
        if top_package(module) == "config"
        for name in names
        if top_package(name) not in ("config", "domain")
    }
    assert sorted(found) == []


def test_only_the_composition_root_reads_the_settings() -> None:
    readers = sorted(
        module
        for module, names in module_imports().items()
        if "service.config" in names and top_package(module) not in READS_SETTINGS
    )
    assert readers == []


def test_the_checks_see_an_upward_import_and_a_cycle() -> None:
    # The rules above are only as good as what they read: a planted edge must show.
    assert floor(top_package("service.domain.message")) < floor(top_package("service.graph.client"))
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse(
        "from service import config\nimport service.graph.client\n"
        "def f():\n    from service.domain.message import InboundMessage\n"
    )
    assert sorted(imported(tree)) == [
        "service.config",
        "service.domain.message",
        "service.graph.client",
    ]


def test_the_chat_poll_parts_import_one_way() -> None:
    # The poll was split by concept (issue 25): the book, the read, the claim and the reader seam sit
    # below the poll, and no part reaches back up to it.
    graph = module_imports()
    assert "service.workers.conversation_reader" in graph
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
