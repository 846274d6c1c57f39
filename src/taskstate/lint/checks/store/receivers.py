"""Which receivers are state stores, and the calls made on them.

A receiver counts as a store only when the function visibly got it from Airflow: a parameter
named `task_state_store` / `asset_state_store`, `context["task_state_store"]`, or an asset
accessor indexed from those. Anything else is somebody else's `.set()`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from taskstate.lint.source import Function

TASK, ASSETS, ASSET = "task_state_store", "asset_state_store", "asset"


@dataclass(frozen=True)
class Kind:
    """What kind of store a receiver is, and for one asset's accessor the asset expression."""

    store: str  # TASK, ASSETS (the per-task collection) or ASSET (one asset's accessor)
    asset: ast.expr | None = None


@dataclass(frozen=True)
class StoreCall:
    """`<store>.<method>(...)` inside `func`, where `<store>` is a state store of `kind`."""

    func: Function
    call: ast.Call
    callee: ast.Attribute
    kind: Kind
    mapped: bool  # func is a TaskFlow task mapped with .expand()

    @property
    def method(self) -> str:
        """The name of the method called on the store."""
        return self.callee.attr

    @property
    def receiver(self) -> ast.expr:
        """The expression the method is called on (the store)."""
        return self.callee.value


def bindings(func: Function) -> dict[str, Kind]:
    """Local names that hold a store, from the parameters and the function's assignments."""
    found: dict[str, Kind] = {}
    for name in func.param_names():
        if name == TASK:
            found[name] = Kind(TASK)
        elif name == ASSETS:
            found[name] = Kind(ASSETS)
    for assign in sorted(func.assigns, key=lambda a: (a.lineno, a.col_offset)):
        kind = kind_of(assign.value, found)
        for target in assign.targets:
            if isinstance(target, ast.Name):
                if kind is None:
                    found.pop(target.id, None)
                else:
                    found[target.id] = kind
    return found


def kind_of(node: ast.expr, names: dict[str, Kind]) -> Kind | None:
    """What store an expression holds: `context["task_state_store"]`, `ass[ORDERS]`, a name..."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Await):
        return None
    if isinstance(node, ast.Subscript):
        index = node.slice
        if isinstance(index, ast.Constant) and index.value in (TASK, ASSETS):
            return Kind(index.value)
        base = kind_of(node.value, names)
        if base is not None and base.store == ASSETS:
            return Kind(ASSET, index)
        return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in (TASK, ASSETS)
    ):
        return Kind(node.args[0].value)
    return None
