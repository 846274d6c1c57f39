"""TS5xx: calls on task_state_store / asset_state_store: values, keys, mapped tasks, assets.

A receiver counts as a store only when the function visibly got it from Airflow: a parameter
named `task_state_store` / `asset_state_store`, `context["task_state_store"]`, or an asset
accessor indexed from those. Anything else is somebody else's `.set()`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from taskstate.lint.checks.base import JOB_ID_KEY, Context, shown, with_note
from taskstate.lint.finding import Finding
from taskstate.lint.source import (
    Function,
    Source,
    argument,
    call_keywords,
    keyword,
    literal_text,
)

_TASK, _ASSETS, _ASSET = "task_state_store", "asset_state_store", "asset"
_KEY_METHODS = frozenset({"get", "set", "delete", "aget", "aset", "adelete", "update"})
_CLEAR = frozenset({"clear", "aclear"})
_DATETIME_CALL = re.compile(
    r"^(datetime\.)?(datetime|date|time|timedelta)"
    r"(\.(now|utcnow|today|fromtimestamp|utcfromtimestamp|fromisoformat|combine|strptime"
    r"|fromordinal|min|max))?$"
    r"|^pendulum\.(now|today|tomorrow|yesterday|datetime|date|time|duration|parse|instance"
    r"|from_timestamp|from_format)$"
)
_OBJECT_CALL = {
    "set": "a set",
    "frozenset": "a set",
    "tuple": "a tuple",
    "bytes": "bytes",
    "bytearray": "bytes",
    "decimal.Decimal": "a Decimal",
    "uuid.uuid4": "a UUID",
    "uuid.uuid1": "a UUID",
    "uuid.UUID": "a UUID",
    "object": "an object",
}


@dataclass(frozen=True)
class _Kind:
    store: str  # _TASK, _ASSETS (the per-task collection) or _ASSET (one asset's accessor)
    asset: ast.expr | None = None


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    if "state_store" not in src.text:
        return
    for func in src.functions:
        bindings = _bindings(func)
        if not bindings and "state_store" not in src.segment(func.node):
            continue
        mapped = func.cls is None and func.name in src.expanded
        for call in func.calls:
            callee = call.func
            if not isinstance(callee, ast.Attribute):
                continue
            kind = _kind(callee.value, bindings)
            if kind is None:
                continue
            method = callee.attr
            if method in ("set", "aset"):
                yield from _value(src, ctx, func, call, callee)
                if kind.store == _TASK:
                    yield from _job_id_retention(src, ctx, call)
            if method in _KEY_METHODS:
                yield from _key(src, ctx, call)
            if mapped and method in ("set", "aset") and kind.store != _TASK:
                yield from _mapped_asset_key(src, ctx, func, call)
            if mapped and method in _CLEAR:
                yield ctx.finding(
                    src,
                    "TS504",
                    call,
                    store=src.segment(callee.value),
                    task=func.name,
                    after=(
                        "# clear every map index from outside the mapped task:\n"
                        "# taskstate's CLI or API (Airflow 3.3+: its state-store CLI / REST API),\n"
                        "# run from a downstream task once all indices are done"
                    ),
                )
        declaration = _declaration(src, func)
        if declaration is not None:
            yield from _undeclared_assets(src, ctx, func, declaration)


def _bindings(func: Function) -> dict[str, _Kind]:
    bindings: dict[str, _Kind] = {}
    for name in func.param_names():
        if name == _TASK:
            bindings[name] = _Kind(_TASK)
        elif name == _ASSETS:
            bindings[name] = _Kind(_ASSETS)
    for assign in sorted(func.assigns, key=lambda a: (a.lineno, a.col_offset)):
        kind = _kind(assign.value, bindings)
        for target in assign.targets:
            if isinstance(target, ast.Name):
                if kind is None:
                    bindings.pop(target.id, None)
                else:
                    bindings[target.id] = kind
    return bindings


def _kind(node: ast.expr, bindings: dict[str, _Kind]) -> _Kind | None:
    """What store an expression holds: `context["task_state_store"]`, `ass[ORDERS]`, a name..."""
    if isinstance(node, ast.Name):
        return bindings.get(node.id)
    if isinstance(node, ast.Await):
        return None
    if isinstance(node, ast.Subscript):
        index = node.slice
        if isinstance(index, ast.Constant) and index.value in (_TASK, _ASSETS):
            return _Kind(index.value)
        base = _kind(node.value, bindings)
        if base is not None and base.store == _ASSETS:
            return _Kind(_ASSET, index)
        return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in (_TASK, _ASSETS)
    ):
        return _Kind(node.args[0].value)
    return None


# --- TS501: values that are not JSON ----------------------------------------------------------
def _value(
    src: Source, ctx: Context, func: Function, call: ast.Call, callee: ast.Attribute
) -> Iterator[Finding]:
    value = argument(call, 1, "value")
    if value is None:
        return
    bad = _non_json(src, value, "")
    origin = ""
    if bad is None and isinstance(value, ast.Name):
        # `now = datetime.now(...)` ... `.set("at", now)`: follow a name bound exactly once
        bound = _single_assignment(func, value.id)
        found = _non_json(src, bound, "") if bound is not None else None
        if bound is not None and found is not None and found[0] is bound:
            bad = (value, found[1], "")
            origin = f" ({value.id} = {src.segment(bound)})"
    if bad is None:
        return
    node, what, path = bad
    replacement = _json_replacement(src, node, what)
    where = (f"{what} at value{path}" if path else what) + origin
    yield ctx.finding(
        src,
        "TS501",
        node,
        store=src.segment(callee.value),
        key=shown(src, argument(call, 0, "key")),
        what=where,
        before=src.lines_of(call),
        after=src.lines_with(node, replacement) if replacement else _NONE_AFTER,
    )


def _single_assignment(func: Function, name: str) -> ast.expr | None:
    """The value of `name = value` when that is the only place the function binds `name`."""
    stores = [
        node
        for node in ast.walk(func.node)
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
    ]
    if len(stores) != 1 or name in func.param_names():
        return None
    for assign in func.assigns:
        if len(assign.targets) == 1 and assign.targets[0] is stores[0]:
            return assign.value
    return None


_NONE_AFTER = (
    "# None is not a value: delete the key to mean 'nothing',\n"
    '# or store an explicit marker such as "" or {}'
)


def _non_json(src: Source, node: ast.expr, path: str) -> tuple[ast.expr, str, str] | None:
    if isinstance(node, ast.Constant):
        if node.value is None:
            return node, "None", path
        if isinstance(node.value, bytes):
            return node, "bytes", path
        return None
    if isinstance(node, ast.Tuple):
        return node, "a tuple", path
    if isinstance(node, ast.Set | ast.SetComp):
        return node, "a set", path
    if isinstance(node, ast.List):
        for i, item in enumerate(node.elts):
            found = _non_json(src, item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(node, ast.Dict):
        for key, item in zip(node.keys, node.values, strict=True):
            if key is None:  # **spread
                continue
            if isinstance(key, ast.Constant) and not isinstance(key.value, str):
                return key, "a non-string dict key", path
            label = f"[{src.segment(key)}]"
            found = _non_json(src, item, path + label)
            if found:
                return found
        return None
    if isinstance(node, ast.Call):
        qual = src.qualname(node.func)
        if qual is None:
            return None
        if _DATETIME_CALL.match(qual) or (
            qual.startswith("datetime.") and _DATETIME_CALL.match(qual[len("datetime.") :])
        ):
            return node, "a datetime", path
        if qual in _OBJECT_CALL:
            return node, _OBJECT_CALL[qual], path
        if (
            qual == "float"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).lower().lstrip("+-") in ("nan", "inf", "infinity")
        ):
            return node, "a non-finite float", path
    return None


def _json_replacement(src: Source, node: ast.expr, what: str) -> str | None:
    text = src.segment(node)
    if what == "a datetime":
        return f"{text}.isoformat()"
    if what == "a tuple" and isinstance(node, ast.Tuple):
        return "[" + ", ".join(src.segment(e) for e in node.elts) + "]"
    if what == "a set":
        return f"sorted({text})"
    if what == "bytes":
        return f"{text}.decode()"
    if what == "a Decimal" or what == "a UUID":
        return f"str({text})"
    if what == "a non-string dict key":
        return repr(str(getattr(node, "value", text)))
    return None


# --- TS506: a job id that expires with ordinary task state -------------------------------------
def _job_id_retention(src: Source, ctx: Context, call: ast.Call) -> Iterator[Finding]:
    key = argument(call, 0, "key")
    text = literal_text(src, key)
    if key is None or text is None or not JOB_ID_KEY.search(text):
        return
    if keyword(call, "retention") is not None or len(call.args) > 2:  # retention is given
        return
    value = argument(call, 1, "value")
    args = f"{src.segment(key)}, {src.segment(value) if value is not None else '...'}"
    yield ctx.finding(
        src,
        "TS506",
        call,
        key=shown(src, key),
        after=ctx.version.never_expire_import()
        + "\n...\n"
        + src.lines_with(call, f"{src.segment(call.func)}({args}, retention=NEVER_EXPIRE)"),
    )


# --- TS502: keys with dots or slashes ----------------------------------------------------------
def _key(src: Source, ctx: Context, call: ast.Call) -> Iterator[Finding]:
    key = argument(call, 0, "key")
    text = literal_text(src, key)
    if key is None or text is None or not ("." in text or "/" in text):
        return
    fixed = re.sub(r"[./]+", "_", text.replace("{}", "{...}"))
    written = src.segment(key)
    quote = written[0] if written[:1] in ("'", '"') else '"'  # keep the user's quote style
    yield ctx.finding(
        src,
        "TS502",
        key,
        key=src.segment(key),
        before=src.lines_of(call),
        after=(src.lines_with(key, f"{quote}{fixed}{quote}") if "{}" not in text else f'"{fixed}"'),
    )


# --- TS503: one constant asset key written by every map index ---------------------------------
def _mapped_asset_key(
    src: Source, ctx: Context, func: Function, call: ast.Call
) -> Iterator[Finding]:
    key = argument(call, 0, "key")
    if key is None:
        return
    resolved = src.resolve(key)
    if not (isinstance(resolved, ast.Constant) and isinstance(resolved.value, str)):
        return
    params = [p for p in func.param_names() if p not in (_TASK, _ASSETS, "self")]
    per_index = (
        f'f"{resolved.value}_{{{params[0]}}}"'
        if params
        else f'f"{resolved.value}_{{ti.map_index}}"'
    )
    yield ctx.finding(
        src,
        "TS503",
        call,
        task=func.name,
        key=src.segment(key),
        after=with_note(src.lines_with(key, per_index), "one key per map index"),
    )


# --- TS505: an asset the task does not declare ---------------------------------------------------
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
    collections = {name: _Kind(_ASSETS) for name in func.param_names() if name == _ASSETS}
    for assign in func.assigns:
        kind = _kind(assign.value, collections)
        if kind is not None and kind.store == _ASSETS:
            for target in assign.targets:
                if isinstance(target, ast.Name):
                    collections[target.id] = kind
    for node in ast.walk(func.node):
        if not isinstance(node, ast.Subscript):
            continue
        kind = _kind(node.value, collections)
        if kind is None or kind.store != _ASSETS:
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
