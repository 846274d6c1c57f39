"""TS501: a value written to a store that is not JSON.

The type → fix advice comes from `taskstate.json_types`, the table the write path's errors use.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.json_types import NON_JSON
from taskstate.lint.checks.base import Context, shown
from taskstate.lint.checks.store.receivers import StoreCall
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, argument

_DATETIME_CALL = re.compile(
    r"^(datetime\.)?(?P<type>datetime|date|time|timedelta)"
    r"(\.(now|utcnow|today|fromtimestamp|utcfromtimestamp|fromisoformat|combine|strptime"
    r"|fromordinal|min|max))?$"
    r"|^pendulum\.(?P<pendulum>now|today|tomorrow|yesterday|datetime|date|time|duration|parse"
    r"|instance|from_timestamp|from_format)$"
)
_PENDULUM_TYPE = {"date": "date", "time": "time", "duration": "timedelta"}  # else a datetime
# constructors (by qualified name) of the non-JSON types in the table, by their type name
_OBJECT_CALL = {
    "set": "set",
    "frozenset": "frozenset",
    "tuple": "tuple",
    "bytes": "bytes",
    "bytearray": "bytearray",
    "decimal.Decimal": "Decimal",
    "uuid.uuid4": "UUID",
    "uuid.uuid1": "UUID",
    "uuid.UUID": "UUID",
    "pathlib.Path": "Path",
    "object": "object",
}
_NONE_AFTER = (
    "# None is not a value: delete the key to mean 'nothing',\n"
    '# or store an explicit marker such as "" or {}'
)
_NON_FINITE_AFTER = (
    '# JSON has no NaN or Infinity: store a string such as "NaN" or leave the key out'
)

# (the offending node, its type name in NON_JSON or one of the special labels below, its path)
_Bad = tuple[ast.expr, str, str]
_NONE, _NON_FINITE, _DICT_KEY = "None", "a non-finite float", "a non-string dict key"
# expressions that need no parentheses before `.method()` or inside a call
_ATOMS = (ast.Name, ast.Call, ast.Set, ast.SetComp, ast.Constant, ast.Attribute, ast.Subscript)


def check_call(src: Source, ctx: Context, site: StoreCall) -> Iterator[Finding]:
    """TS501: a `set()` value that is not JSON (None, NaN, a datetime, ...), followed
    through a name bound once when the value is a plain name."""
    if site.method not in ("set", "aset"):
        return
    value = argument(site.call, 1, "value")
    if value is None:
        return
    bad = _non_json(src, value, "")
    origin = ""
    if bad is None and isinstance(value, ast.Name):
        # `now = datetime.now(...)` ... `.set("at", now)`: follow a name bound exactly once
        bound = _single_assignment(site.func, value.id)
        found = _non_json(src, bound, "") if bound is not None else None
        if bound is not None and found is not None and found[0] is bound:
            bad = (value, found[1], "")
            origin = f" ({value.id} = {src.segment(bound)})"
    if bad is None:
        return
    node, kind, path = bad
    what = NON_JSON[kind].what if kind in NON_JSON else kind
    yield ctx.finding(
        src,
        "TS501",
        node,
        store=src.segment(site.receiver),
        key=shown(src, argument(site.call, 0, "key")),
        what=(f"{what} at value{path}" if path else what) + origin,
        before=src.lines_of(site.call),
        after=_after(src, node, kind),
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


def _non_json(src: Source, node: ast.expr, path: str) -> _Bad | None:
    if isinstance(node, ast.Constant):
        if node.value is None:
            return node, _NONE, path
        if isinstance(node.value, bytes):
            return node, "bytes", path
        return None
    if isinstance(node, ast.Tuple):
        return node, "tuple", path
    if isinstance(node, ast.Set | ast.SetComp):
        return node, "set", path
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
                return key, _DICT_KEY, path
            found = _non_json(src, item, f"{path}[{src.segment(key)}]")
            if found:
                return found
        return None
    if isinstance(node, ast.Call):
        return _non_json_call(src, node, path)
    return None


def _non_json_call(src: Source, node: ast.Call, path: str) -> _Bad | None:
    qual = src.qualname(node.func)
    if qual is None:
        return None
    match = _DATETIME_CALL.match(qual)
    if match is None and qual.startswith("datetime."):  # `import datetime`: datetime.datetime.now
        match = _DATETIME_CALL.match(qual[len("datetime.") :])
    if match is not None:
        pendulum = match["pendulum"]
        kind = _PENDULUM_TYPE.get(pendulum, "datetime") if pendulum else match["type"]
        return node, kind, path
    if qual in _OBJECT_CALL:
        return node, _OBJECT_CALL[qual], path
    if (
        qual == "float"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).lower().lstrip("+-") in ("nan", "inf", "infinity")
    ):
        return node, _NON_FINITE, path
    return None


def _after(src: Source, node: ast.expr, kind: str) -> str:
    """The user's line with the value made JSON, or the table's advice when no rewrite is sure."""
    text = src.segment(node)
    if kind == _NONE:
        return _NONE_AFTER
    if kind == _NON_FINITE:
        return _NON_FINITE_AFTER
    if kind == _DICT_KEY:
        return src.lines_with(node, repr(str(getattr(node, "value", text))))
    if isinstance(node, ast.Tuple):  # a literal: write it as a list literal
        return src.lines_with(node, "[" + ", ".join(src.segment(e) for e in node.elts) + "]")
    fix = NON_JSON[kind]
    if fix.rewrite is None:
        return f"# {fix.advice}"
    operand = text if isinstance(node, _ATOMS) else f"({text})"
    return src.lines_with(node, fix.rewrite.replace("value", operand))
