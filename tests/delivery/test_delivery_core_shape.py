"""What the delivery core's rebuild leaves true (issue 35), read from the source so a new module is held
to it the day it is written: one message key type, background work owned by an object the replica
wires (never a bare ``create_task``), and the delivery half built in one place."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"
KEY_HOME = SERVICE / "domain" / "message.py"
# The parts between a won claim and an acknowledgement: built only by wiring.wire_delivery.
DELIVERY_HALF = {
    "DeliveryHub",
    "HostRecords",
    "ClaimIntents",
    "ClaimLookup",
    "HostKeeper",
    "AckReactions",
    "Background",
}
WIRING = SERVICE / "wiring.py"
NO_BARE_TASKS = ("delivery", "tools")
TASK_STARTERS = {"create_task", "ensure_future"}


def modules(under: Path = SERVICE) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(under.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def is_tuple_alias(node: ast.AST) -> bool:
    """``X = tuple[...]`` (or ``X: TypeAlias = tuple[...]``)."""
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    return (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Name)
        and value.value.id in {"tuple", "Tuple"}
    )


def message_key_types(path: Path, tree: ast.Module) -> list[str]:
    """Names a module gives to a tuple type or a NamedTuple that sound like a message's key."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and is_tuple_alias(node):
            found += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and is_tuple_alias(node):
            found += [node.target.id] if isinstance(node.target, ast.Name) else []
        elif isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id == "NamedTuple" for b in node.bases
        ):
            found.append(node.name)
    return [f"{path.relative_to(SERVICE.parent)}: {n}" for n in found if n.endswith("Key")]


def test_one_message_key_type_in_the_service() -> None:
    found = [k for path, tree in modules() for k in message_key_types(path, tree)]
    assert found == ["service/domain/message.py: MessageKey"]


def task_group_names(function: ast.AST) -> set[str]:
    """Names bound by ``async with asyncio.TaskGroup() as name``: a group its owner holds."""
    return {
        item.optional_vars.id
        for node in ast.walk(function)
        if isinstance(node, ast.AsyncWith)
        for item in node.items
        if isinstance(item.optional_vars, ast.Name)
        and isinstance(item.context_expr, ast.Call)
        and ast.unparse(item.context_expr.func).endswith("TaskGroup")
    }


def bare_tasks(path: Path, tree: ast.Module) -> list[str]:
    found = []
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    for function in functions:
        groups = task_group_names(function)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in TASK_STARTERS
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id in groups)
            ):
                found.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno}")
    return found


def test_no_bare_task_in_delivery_or_tools() -> None:
    found = [
        t
        for part in NO_BARE_TASKS
        for path, tree in modules(SERVICE / part)
        for t in bare_tasks(path, tree)
    ]
    assert found == []


def test_the_task_check_sees_a_bare_task_and_lets_a_held_group_by() -> None:
    bare = ast.parse("import asyncio\nasync def f():\n    asyncio.create_task(g())\n")
    held = ast.parse(
        "import asyncio\nasync def f():\n    async with asyncio.TaskGroup() as tasks:\n"
        "        tasks.create_task(g())\n"
    )
    loop = ast.parse("import asyncio\ndef f():\n    asyncio.get_running_loop().create_task(g())\n")
    where = SERVICE / "delivery" / "planted.py"
    assert bare_tasks(where, bare) == ["service/delivery/planted.py:3"]
    assert bare_tasks(where, held) == []
    assert bare_tasks(where, loop) == ["service/delivery/planted.py:3"]


def constructions(tree: ast.Module) -> set[str]:
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    } & DELIVERY_HALF


def test_the_delivery_half_is_built_only_in_the_wiring() -> None:
    built = {
        str(path.relative_to(SERVICE.parent)): sorted(names)
        for path, tree in modules()
        if path != WIRING and (names := constructions(tree))
    }
    assert built == {}
    assert constructions(ast.parse(WIRING.read_text())) == DELIVERY_HALF


def test_the_key_check_sees_a_second_key_type() -> None:
    planted = ast.parse("DeliveryKey = tuple[str, str]\nclass ChatKey(NamedTuple):\n    a: str\n")
    assert message_key_types(SERVICE / "delivery" / "planted.py", planted) == [
        "service/delivery/planted.py: DeliveryKey",
        "service/delivery/planted.py: ChatKey",
    ]


def test_the_hub_and_the_keeper_stay_small_and_the_hub_keeps_no_message_table() -> None:
    # Its records are delivery/deliveries.py's, its choices delivery/choice.py's, its hand-over
    # delivery/handover.py's: what is left is the targets it holds.
    hub = SERVICE / "delivery" / "hub.py"
    assert len(hub.read_text().splitlines()) < 250
    # The keeper likewise: its rules, acknowledgements and figures are modules of their own.
    assert len((SERVICE / "delivery" / "host_keeper.py").read_text().splitlines()) < 250
    fields = [
        ast.unparse(node.annotation)
        for node in ast.walk(ast.parse(hub.read_text()))
        if isinstance(node, ast.AnnAssign)
    ]
    assert not [f for f in fields if "MessageKey" in f], fields
