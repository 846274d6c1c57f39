"""TS505: a task that indexes asset_state_store with an asset it does not declare."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.checks.store.receivers import ASSETS, Kind, kind_of
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, argument, call_keywords


def check_function(src: Source, ctx: Context, func: Function) -> Iterator[Finding]:
    """TS505 findings for one function: assets it indexes asset_state_store with but does
    not declare as inlets or outlets."""
    declaration = _declaration(src, func)
    if declaration is not None:
        yield from _undeclared_assets(src, ctx, func, declaration)


def _declaration(src: Source, func: Function) -> ast.expr | None:
    """Where the task's inlets/outlets are written: its `@task(...)` decorator, or the one
    operator call that runs it as `python_callable`; None when that cannot be pinned down."""
    dec = func.task_decorator
    if dec is not None:
        # an @asset function is its own outlet: its inlets/outlets are not in the decorator
        kind = (src.decorator_name(dec) or "").split(".")[0]
        return dec if kind == "task" and func.name not in src.overridden else None
    if func.cls is not None or not func.is_task:
        return None
    runners = [
        call
        for call, _ in src.calls
        if any(
            kw.arg == "python_callable"
            and isinstance(kw.value, ast.Name)
            and kw.value.id == func.name
            for kw in call.keywords
        )
    ]
    return runners[0] if len(runners) == 1 else None


def _undeclared_assets(
    src: Source, ctx: Context, func: Function, declaration: ast.expr
) -> Iterator[Finding]:
    declared = _declared_assets(src, declaration)
    if declared is None:
        return
    # names that ever held the collection: `asset_state_store = asset_state_store[A]` rebinds
    # the name to one accessor, but the subscript on its right still indexes the collection
    collections = {name: Kind(ASSETS) for name in func.param_names() if name == ASSETS}
    for assign in func.assigns:
        kind = kind_of(assign.value, collections)
        if kind is not None and kind.store == ASSETS:
            for target in assign.targets:
                if isinstance(target, ast.Name):
                    collections[target.id] = kind
    for node in ast.walk(func.node):
        if not isinstance(node, ast.Subscript):
            continue
        kind = kind_of(node.value, collections)
        if kind is None or kind.store != ASSETS:
            continue
        asset = node.slice
        if not isinstance(asset, ast.Name | ast.Attribute) or not _module_level(src, func, asset):
            continue
        if _asset_identity(src, asset) in declared:
            continue
        name = src.segment(asset)
        yield ctx.finding(
            src,
            "TS505",
            node,
            task=func.name,
            asset=name,
            before=src.lines_of(declaration, limit=3) + "\n...\n" + src.lines_of(node),
            after=_declare_after(src, declaration, name),
        )


def _declared_assets(src: Source, declaration: ast.expr) -> set[str] | None:
    """Identities of the task's inlets and outlets; None when they cannot all be read."""
    keywords = call_keywords(declaration)
    if isinstance(declaration, ast.Call) and any(kw.arg is None for kw in declaration.keywords):
        return None  # @task(**options) / Operator(**options): unknown
    declared: set[str] = set()
    for name in ("inlets", "outlets"):
        value = keywords.get(name)
        if value is None:
            continue
        value = src.resolve(value)
        if not isinstance(value, ast.List | ast.Tuple):
            return None
        for item in value.elts:
            if not isinstance(item, ast.Name | ast.Attribute):
                return None
            resolved = src.resolve(item)
            if isinstance(resolved, ast.Call):
                qual = src.qualname(resolved.func) or ""
                if qual.split(".")[-1] != "Asset" and qual.split(".")[-1] != "Dataset":
                    return None  # an alias, a ref, or something computed: could be anything
            declared.add(_asset_identity(src, item))
    return declared


def _asset_identity(src: Source, node: ast.expr) -> str:
    """An asset's name when its definition is visible, else the expression's text."""
    resolved = src.resolve(node)
    if isinstance(resolved, ast.Call):
        name = argument(resolved, 0, "name") or argument(resolved, 0, "uri")
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return "asset:" + name.value
    return src.segment(node)


def _module_level(src: Source, func: Function, node: ast.expr) -> bool:
    """An asset named by a module-level name (not a parameter or a local of the task)."""
    head = node
    while isinstance(head, ast.Attribute):
        head = head.value
    if not isinstance(head, ast.Name):
        return False
    if head.id in func.param_names():
        return False
    for assign in func.assigns:
        if any(isinstance(t, ast.Name) and t.id == head.id for t in assign.targets):
            return False
    for sub in ast.walk(func.node):
        if isinstance(sub, ast.For | ast.comprehension) and any(
            isinstance(t, ast.Name) and t.id == head.id for t in ast.walk(sub.target)
        ):
            return False
    return head.id in src.values or head.id in src.imports


def _declare_after(src: Source, declaration: ast.expr, asset: str) -> str:
    keywords = call_keywords(declaration)
    for name in ("outlets", "inlets"):
        declared = keywords.get(name)
        if isinstance(declared, ast.List):
            items = [src.segment(e) for e in declared.elts] + [asset]
            return src.lines_with(declared, "[" + ", ".join(items) + "]")
    note = f"  # or outlets=[{asset}] when the task writes it"
    if isinstance(declaration, ast.Call) and not src.is_task_decorator(declaration):
        return f"{src.segment(declaration.func)}(..., inlets=[{asset}]){note}"  # an operator
    head = src.segment(declaration.func if isinstance(declaration, ast.Call) else declaration)
    return f"@{head}(inlets=[{asset}]){note}"
