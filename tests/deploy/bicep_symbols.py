"""Symbol tables of Bicep files, for the checks a Bicep compiler would make (none installs here).

pycep-parser's JSON cannot tell an identifier from a string literal (both become plain strings), so
the symbols are read from the Lark parse tree of pycep's own grammar, where an identifier is a
``STRING`` token and a literal a ``QUOTED_INTERPOLATION``. ``${...}`` interpolations are parsed as
expressions in their own right.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from lark import Lark, Token, Tree

# Element kinds that declare a name, by the grammar's rule names.
DECLARING_ELEMENTS = {
    "param": "param",
    "var": "var",
    "output": "output",
    "resource": "resource",
    "module": "module",
    "custom_type": "type",
    "custom_func": "func",
}


@dataclass(frozen=True)
class ModuleUse:
    symbol: str
    path: Path
    params: frozenset[str]
    line: int


@dataclass
class BicepSymbols:
    path: Path
    declared: dict[str, str] = field(default_factory=dict)  # referable name -> kind
    outputs: set[str] = field(default_factory=set)  # outputs have a namespace of their own
    params_with_default: set[str] = field(default_factory=set)
    references: list[tuple[str, int]] = field(
        default_factory=list
    )  # (identifier, line), scoped locals excluded
    module_uses: list[ModuleUse] = field(default_factory=list)
    module_output_refs: list[tuple[str, str, int]] = field(
        default_factory=list
    )  # (module symbol, output, line)

    @property
    def params(self) -> set[str]:
        return {name for name, kind in self.declared.items() if kind == "param"}

    def undefined(self) -> list[str]:
        return [
            f"{self.path.name}:{line}: {name!r} is not declared"
            for name, line in self.references
            if name not in self.declared
        ]


@functools.cache
def _parser() -> Lark:
    grammar = (files("pycep") / "bicep.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, regex=True)


def load_symbols(path: Path) -> BicepSymbols:
    symbols = BicepSymbols(path=path)
    tree = _parser().parse(path.read_text())
    elements = [child for child in tree.children if isinstance(child, Tree)]
    for element in elements:
        kind = DECLARING_ELEMENTS.get(str(element.data))
        if kind is None:
            continue
        name = _first_token(element)
        if kind == "output":
            symbols.outputs.add(name)
            continue
        symbols.declared[name] = kind
        last = element.children[-1]
        if kind == "param" and isinstance(last, Tree) and last is not _data_type(element):
            symbols.params_with_default.add(name)
    for element in elements:
        _visit_element(element, symbols)
    return symbols


def _visit_element(element: Tree, symbols: BicepSymbols) -> None:
    kind = str(element.data)
    for child in element.children:
        if not isinstance(child, Tree) or child.data in (
            "data_type",
            "type_api_pair",
            "module_path",
        ):
            continue
        _walk(child, symbols, frozenset())
    if kind == "module":
        name = _first_token(element)
        module_path = _unquote(str(_child(element, "module_path").children[0]))
        body = element.children[-1]
        while isinstance(body, Tree) and body.data in ("deploy_condition", "loop"):
            body = body.children[-1]  # the module's object, after `if (...)` or `for ... :`
        passed = (
            frozenset(_object_keys(_object_value(body, "params")))
            if isinstance(body, Tree)
            else frozenset()
        )
        symbols.module_uses.append(
            ModuleUse(
                name, (symbols.path.parent / module_path).resolve(), passed, element.meta.line
            )
        )


def _walk(node: Tree | Token, symbols: BicepSymbols, scope: frozenset[str]) -> None:
    if isinstance(node, Token):
        if node.type == "QUOTED_INTERPOLATION":
            for expression in _interpolations(str(node)):
                _walk_expression_text(expression, symbols, scope, node.line or 0)
        return
    data = str(node.data)
    if data == "string":
        token = node.children[0]
        if isinstance(token, Token) and token.type == "STRING":
            if str(token) not in scope:
                symbols.references.append((str(token), token.line or 0))
        else:
            _walk(token, symbols, scope)
        return
    if data == "data_type":
        return
    if data == "key":  # a property name, unless it is an interpolated string
        for child in node.children:
            if isinstance(child, Token) and child.type == "QUOTED_INTERPOLATION":
                _walk(child, symbols, scope)
        return
    if data in ("property_accessor", "nested_resource_accessor"):
        target, path = node.children[0], node.children[-1]
        _walk(target, symbols, scope)
        _walk_path(path, symbols, scope)
        _note_module_output(target, path, symbols)
        return
    if data == "function_accessor":
        _walk(node.children[0], symbols, scope)
        _walk_arguments(node, symbols, scope)
        return
    if data == "loop":
        head = node.children[0]
        names = [str(t) for t in head.children if isinstance(t, Token) and t.type == "STRING"]
        source = [c for c in head.children if isinstance(c, Tree)]
        for child in source:
            _walk(child, symbols, scope)
        inner = scope | frozenset(names)
        for child in node.children[1:]:
            if child is not None:
                _walk(child, symbols, inner)
        return
    if data == "lambda_expression":
        *params, body = node.children
        names = [str(p.children[0]) for p in params if isinstance(p, Tree) and p.data == "string"]
        _walk(body, symbols, scope | frozenset(names))
        return
    if data == "child_resource":
        symbols.declared.setdefault(str(node.children[0]), "resource")
        for child in node.children[1:]:
            if isinstance(child, Tree):
                _walk(child, symbols, scope)
        return
    for child in node.children:
        if child is not None:
            _walk(child, symbols, scope)


def _walk_path(path: Tree | Token, symbols: BicepSymbols, scope: frozenset[str]) -> None:
    """The right side of ``a.b`` or ``a::b``: names here are properties, but index expressions are not."""
    if isinstance(path, Token):
        return
    data = str(path.data)
    if data == "string":
        return
    if data == "operator":
        _walk_path(path.children[0], symbols, scope)
        return
    if data in ("property_accessor", "nested_resource_accessor"):
        for child in path.children:
            _walk_path(child, symbols, scope)
        return
    if data == "index_accessor":
        _walk_path(path.children[0], symbols, scope)
        _walk(path.children[-1], symbols, scope)
        return
    if data == "function_accessor":
        _walk_path(path.children[0], symbols, scope)
        _walk_arguments(path, symbols, scope)
        return
    _walk(path, symbols, scope)


def _walk_arguments(accessor: Tree, symbols: BicepSymbols, scope: frozenset[str]) -> None:
    """The arguments of ``x.listKeys(...)``: after the target and the function name."""
    for child in accessor.children[2:]:
        if child is not None:
            _walk(child, symbols, scope)


def _note_module_output(target: Tree | Token, path: Tree | Token, symbols: BicepSymbols) -> None:
    """Records ``module.outputs.name`` so the output can be checked against the module's file."""
    name = _identifier(target)
    if name is None or symbols.declared.get(name) != "module":
        return
    parts = _path_names(path)
    if len(parts) >= 2 and parts[0] == "outputs":
        symbols.module_output_refs.append(
            (name, parts[1], path.meta.line if isinstance(path, Tree) else 0)
        )


def _path_names(path: Tree | Token) -> list[str]:
    if isinstance(path, Token):
        return []
    data = str(path.data)
    if data == "string":
        return [str(path.children[0])]
    if data in ("operator", "index_accessor", "function_accessor"):
        return _path_names(path.children[0])
    if data == "property_accessor":
        return _path_names(path.children[0]) + _path_names(path.children[-1])
    return []


def _identifier(node: Tree | Token) -> str | None:
    if isinstance(node, Tree) and node.data == "string":
        token = node.children[0]
        if isinstance(token, Token) and token.type == "STRING":
            return str(token)
    return None


def _walk_expression_text(
    expression: str, symbols: BicepSymbols, scope: frozenset[str], line: int
) -> None:
    tree = _parser().parse(f"var interpolation = {expression}\n")
    var = tree.children[0]
    assert isinstance(var, Tree)  # the snippet's one statement, the var declaration
    before = len(symbols.references)
    _walk(var.children[-1], symbols, scope)
    # Lines inside the snippet are relative to it: report the string's own line.
    symbols.references[before:] = [(name, line) for name, _ in symbols.references[before:]]


def _interpolations(literal: str) -> list[str]:
    """The expressions of every ``${...}`` in a quoted Bicep string (nested braces and quotes allowed)."""
    found: list[str] = []
    i = 0
    while (start := literal.find("${", i)) != -1:
        depth, j, quoted = 1, start + 2, False
        while j < len(literal) and depth:
            ch = literal[j]
            if ch == "'" and literal[j - 1] != "\\":
                quoted = not quoted
            elif not quoted and ch == "{":
                depth += 1
            elif not quoted and ch == "}":
                depth -= 1
            j += 1
        found.append(literal[start + 2 : j - 1])
        i = j
    return found


def _object_value(obj: Tree, key: str) -> Tree | None:
    for pair in obj.children:
        if isinstance(pair, Tree) and pair.data == "pair":
            key_node = pair.children[0]
            if _unquote(str(key_node.children[0])) == key:
                return pair.children[1]
    return None


def _object_keys(obj: Tree | None) -> list[str]:
    if obj is None:
        return []
    return [
        _unquote(str(pair.children[0].children[0]))
        for pair in obj.children
        if isinstance(pair, Tree) and pair.data == "pair"
    ]


def _first_token(element: Tree) -> str:
    return next(str(c) for c in element.children if isinstance(c, Token) and c.type == "STRING")


def _child(element: Tree, name: str) -> Tree:
    return next(c for c in element.children if isinstance(c, Tree) and c.data == name)


def _data_type(element: Tree) -> Tree | None:
    return next(
        (c for c in element.children if isinstance(c, Tree) and c.data == "data_type"), None
    )


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text
