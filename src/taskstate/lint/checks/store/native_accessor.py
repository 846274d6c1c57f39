"""TS507: calls that Airflow 3.3+'s native accessors do not have.

From 3.3, Airflow's own accessors are what a task finds in its context unless
`[state_store] taskstate_mode = taskstate` keeps taskstate's. Their methods, read from Airflow
3.3.2 (`airflow/sdk/execution_time/context.py`): `TaskStateStoreAccessor` has get, set, delete
and clear; `AssetStateStoreAccessor` has those and aget, aset, adelete, aclear. Any other method
of taskstate's accessors raises AttributeError there when the task runs. Reported only when the
target is known to be 3.3+: the deployment's config is not read, so the mode is unknown.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.checks.store.receivers import ASSET, TASK, StoreCall
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source, argument

# taskstate's methods the native accessor lacks, per kind of receiver
_MISSING = {
    TASK: frozenset(
        {"update", "compare_and_set", "keys", "items", "aget", "aset", "adelete", "aclear"}
    ),
    ASSET: frozenset({"update", "compare_and_set", "keys", "items"}),
}
_KEEP_OURS = (
    "# airflow.cfg, to keep taskstate's accessors on Airflow 3.3+:\n"
    "#   [state_store]\n"
    "#   taskstate_mode = taskstate\n"
)
_SETTING = "set [state_store] taskstate_mode = taskstate"


def check_call(src: Source, ctx: Context, site: StoreCall) -> Iterator[Finding]:
    """TS507 on Airflow 3.3+: a call to a taskstate method the native accessor lacks."""
    if ctx.version.native is not True or site.method not in _MISSING.get(site.kind.store, ()):
        return
    store = src.segment(site.receiver)
    todo, rewrite = _instead(src, site, store)
    yield ctx.finding(
        src,
        "TS507",
        site.call,
        call=f"{store}.{site.method}()",
        version=ctx.version.label,
        todo=todo,
        before=src.lines_of(site.call),
        after=_KEEP_OURS + rewrite,
    )


def _instead(src: Source, site: StoreCall, store: str) -> tuple[str, str]:
    """What to do besides the setting, and the call rewritten for Airflow's accessor."""
    call, method = site.call, site.method

    def text(node: ast.expr | None, missing: str) -> str:
        return src.segment(node) if node is not None else missing

    key = text(argument(call, 0, "key"), "key")
    if method == "update":
        fn = text(argument(call, 1, "fn"), "fn")
        default = argument(call, 2, "default")
        read = f"{store}.get({key}, {src.segment(default)})" if default else f"{store}.get({key})"
        return (
            f"{_SETTING}, or rewrite it with get() and set()",
            "# or with Airflow's accessor (get then set: not atomic):\n"
            f"new = ({fn})({read})\n{store}.set({key}, new)",
        )
    if method == "compare_and_set":
        expected = text(argument(call, 1, "expected"), "expected")
        new = text(argument(call, 2, "new"), "new")
        return (
            f"{_SETTING}, or rewrite it with get() and set()",
            "# or with Airflow's accessor (get then set: not atomic):\n"
            f"if {store}.get({key}) == {expected}:\n    {store}.set({key}, {new})",
        )
    if method in ("keys", "items"):
        return (
            f"{_SETTING}; Airflow's accessor cannot list keys",
            "# or keep the key names you need in one key of their own and get() each",
        )
    sync = method[1:]  # aget -> get: Airflow's task accessor is synchronous
    args = ", ".join(src.segment(a) for a in (*call.args, *call.keywords))
    return (
        f"{_SETTING}, or call {sync}() without await",
        f"# or with Airflow's accessor (synchronous):\n{store}.{sync}({args})",
    )
