"""TS601: naive UTC timestamps (`datetime.utcnow()`), with a safe mechanical fix."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.finding import Edit, Finding, Fix
from taskstate.lint.source import Source

_NAIVE = frozenset({"utcnow", "utcfromtimestamp"})


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS601 findings for `datetime.utcnow()` / `utcfromtimestamp()`, with a fix to an aware
    UTC call where the call's form allows one."""
    if "utc" not in src.text:
        return
    tz: tuple[str, str | None] | None = None
    for call, _func in src.calls:
        callee = call.func
        if not isinstance(callee, ast.Attribute) or callee.attr not in _NAIVE:
            continue
        if not _is_datetime_class(src, callee.value):
            continue
        if tz is None:
            tz = _utc_expression(src)
        utc, needs_import = tz
        owner = src.segment(callee.value)
        if callee.attr == "utcnow" and not call.args and not call.keywords:
            replacement = f"{owner}.now(tz={utc})"
        elif callee.attr == "utcfromtimestamp" and len(call.args) == 1 and not call.keywords:
            replacement = f"{owner}.fromtimestamp({src.segment(call.args[0])}, tz={utc})"
        else:
            replacement = None
        fix = None
        if replacement is not None:
            start, end = src.span(call)
            fix = Fix((Edit(start, end, replacement),), needs_import, "use an aware UTC datetime")
        after = (
            src.lines_with(call, replacement)
            if replacement
            else (f"{owner}.now(tz={utc})  # or .fromtimestamp(ts, tz={utc})")
        )
        if needs_import and replacement:
            after = f"{needs_import}\n...\n{after}"
        yield ctx.finding(src, "TS601", call, call=f"{owner}.{callee.attr}", after=after, fix=fix)


def _is_datetime_class(src: Source, node: ast.expr) -> bool:
    qual = src.qualname(node)
    if qual == "datetime.datetime":
        return True
    # a bare `datetime` the file never imports: a snippet; `import datetime` makes it the module
    return qual == "datetime" and "datetime" not in src.imports


def _utc_expression(src: Source) -> tuple[str, str | None]:
    """How this file can say UTC: an existing import if it has one, else the import to add."""
    for local, qual in src.imports.items():
        if qual == "datetime.timezone":
            return f"{local}.utc", None
    for local, qual in src.imports.items():
        if qual == "datetime":
            return f"{local}.timezone.utc", None
    if "timezone" not in src.imports and "timezone" not in src.bound:
        return "timezone.utc", "from datetime import timezone"
    # `timezone` already names something else here (often pendulum's): import under another name
    return "dt_timezone.utc", "from datetime import timezone as dt_timezone"
