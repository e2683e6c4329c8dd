"""docs/azure.md §2 names every Graph route the service calls and every resource it subscribes to, so an
operator granting what the table lists grants everything the fleet needs."""

from __future__ import annotations

import ast
import inspect
import pkgutil
import re
from importlib import import_module

import pytest

from service.graph import resources
from service.notifications.subscription_plan import ChannelPlan, Wanted, wanted_subscriptions
from tests.deploy.deploy_facts import REPO_ROOT

AZURE_DOC = REPO_ROOT / "docs" / "azure.md"


def permissions_section() -> str:
    text = AZURE_DOC.read_text()
    start = text.index("## 2. Graph permissions")
    return text[start : text.index("\n## 3.", start)]


def client_routes() -> set[str]:
    """The route templates of service/graph/resources/: `url`'s first and `get_one`'s third argument."""
    routes: set[str] = set()
    modules = [
        import_module(m.name)
        for m in pkgutil.iter_modules(resources.__path__, "service.graph.resources.")
    ]
    trees = [ast.parse(inspect.getsource(module)) for module in modules]
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            position = {"url": 0, "get_one": 2}.get(node.func.attr)
            if position is not None and len(node.args) > position:
                argument = node.args[position]
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    routes.add(argument.value)
    return routes


def documented(route: str, section: str) -> bool:
    """Whether `/route` appears whole, each `{}` standing for any one segment (`{id}`, `inbox`)."""
    pattern = "/" + "[^/ `]+".join(re.escape(part) for part in route.split("{}"))
    return re.search(pattern + r"(?![\w/{])", section) is not None


def test_the_route_extraction_sees_the_clients_calls() -> None:
    routes = client_routes()
    assert {"me", "chats/{}/messages", "subscriptions", "subscriptions/{}/reauthorize"} <= routes
    assert documented("chats/{}/messages", "`GET /chats/{id}/messages`")
    assert not documented("chats", "`GET /chats/{id}`")


@pytest.mark.parametrize("route", sorted(client_routes()))
def test_every_graph_route_the_service_calls_is_in_the_permission_table(route: str) -> None:
    assert documented(route, permissions_section()), (
        f"docs/azure.md §2 does not say which permission /{route} needs"
    )


@pytest.mark.parametrize(
    "wanted",
    (
        *wanted_subscriptions(
            "{id}",
            "https://fleet.example.com/graph/notifications",
            "https://fleet.example.com/graph/lifecycle",
        ),
        ChannelPlan(
            "https://fleet.example.com/graph/notifications",
            "https://fleet.example.com/graph/lifecycle",
            limit=1,
        ).subscription("{id}/{id}"),
    ),
    ids=lambda w: w.kind.value,
)
def test_every_resource_the_fleet_subscribes_to_is_in_the_permission_table(wanted: Wanted) -> None:
    assert f"`{wanted.resource}`" in permissions_section()
