"""TS503 (one constant asset key written by every map index), TS504 (clear() when mapped)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import Context, with_note
from taskstate.lint.checks.store.receivers import ASSETS, TASK, StoreCall
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source, argument

_CLEAR = frozenset({"clear", "aclear"})


def check_call(src: Source, ctx: Context, site: StoreCall) -> Iterator[Finding]:
    """TS503 and TS504 findings for a call made inside a task mapped with `.expand()`."""
    if not site.mapped:
        return
    if site.method in ("set", "aset") and site.kind.store != TASK:
        yield from _constant_asset_key(src, ctx, site)
    if site.method in _CLEAR:
        yield ctx.finding(
            src,
            "TS504",
            site.call,
            store=src.segment(site.receiver),
            task=site.func.name,
            after=(
                "# clear every map index from outside the mapped task:\n"
                "# taskstate's CLI or API (Airflow 3.3+: its state-store CLI / REST API),\n"
                "# run from a downstream task once all indices are done"
            ),
        )


def _constant_asset_key(src: Source, ctx: Context, site: StoreCall) -> Iterator[Finding]:
    key = argument(site.call, 0, "key")
    if key is None:
        return
    resolved = src.resolve(key)
    if not (isinstance(resolved, ast.Constant) and isinstance(resolved.value, str)):
        return
    params = [p for p in site.func.param_names() if p not in (TASK, ASSETS, "self")]
    per_index = (
        f'f"{resolved.value}_{{{params[0]}}}"'
        if params
        else f'f"{resolved.value}_{{ti.map_index}}"'
    )
    yield ctx.finding(
        src,
        "TS503",
        site.call,
        task=site.func.name,
        key=src.segment(key),
        after=with_note(src.lines_with(key, per_index), "one key per map index"),
    )
