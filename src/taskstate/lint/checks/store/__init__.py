"""TS5xx: calls on task_state_store / asset_state_store, one module per family.

The receivers are resolved once per function (`receivers`), then every call on a store goes to
each family: values (TS501), keys (TS502, TS506), mapped tasks (TS503, TS504), the native
accessor of Airflow 3.3+ (TS507); assets (TS505) look at the whole function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.checks.store import assets, keys, mapped, native_accessor, receivers, values
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source

_CALL_FAMILIES = (values.check_call, keys.check_call, mapped.check_call, native_accessor.check_call)


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS5xx findings for one file: every call on a resolved store, per function, goes to
    each call family, then the function goes to the assets check."""
    if "state_store" not in src.text:
        return
    for func in src.functions:
        names = receivers.bindings(func)
        if not names and "state_store" not in src.segment(func.node):
            continue
        is_mapped = func.cls is None and func.name in src.expanded
        for call in func.calls:
            callee = call.func
            if not isinstance(callee, ast.Attribute):
                continue
            kind = receivers.kind_of(callee.value, names)
            if kind is None:
                continue
            site = receivers.StoreCall(func, call, callee, kind, is_mapped)
            for family in _CALL_FAMILIES:
                yield from family(src, ctx, site)
        yield from assets.check_function(src, ctx, func)
