"""TS2xx: XCom used to carry a job id or progress across retries (it is cleared per try)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from taskstate.lint.checks.base import JOB_ID_KEY, Context, shown, store_preamble
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, argument, keyword, literal_text


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS2xx findings for one file, looked for in every function that runs as a task."""
    if "xcom_push" not in src.text:
        return
    for func in src.functions:
        if func.is_task:
            yield from _check_function(src, ctx, func)


def _check_function(src: Source, ctx: Context, func: Function) -> Iterator[Finding]:
    pushes: list[tuple[ast.Call, str]] = []
    pulled: set[str] = set()
    for call in func.calls:
        callee = call.func
        if not isinstance(callee, ast.Attribute):
            continue
        if callee.attr == "xcom_push":
            key = literal_text(src, _push_arg(call, 0, "key"))
            if key is not None:
                pushes.append((call, key))
        elif callee.attr == "xcom_pull" and _reads_own_xcom(func, call):
            # TaskInstance.xcom_pull(task_ids, dag_id, key, ...); BaseOperator's adds context
            key = literal_text(src, argument(call, 3 if _on_self(call) else 2, "key"))
            if key is not None:
                pulled.add(key)
    for call, key in pushes:
        key_node = _push_arg(call, 0, "key")
        if key in pulled:
            yield ctx.finding(
                src, "TS201", call, key=shown(src, key_node), after=_after(src, func, call)
            )
        elif JOB_ID_KEY.search(key) and func.task_decorator is not None:
            # only TaskFlow code: operators push ids on purpose, for downstream tasks and links
            yield ctx.finding(
                src, "TS202", call, key=shown(src, key_node), after=_after(src, func, call)
            )


def _on_self(call: ast.Call) -> bool:
    """`self.xcom_push(context, key, value)`: BaseOperator's form, with context first."""
    callee = call.func
    return (
        isinstance(callee, ast.Attribute)
        and isinstance(callee.value, ast.Name)
        and callee.value.id == "self"
    )


def _push_arg(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """TaskInstance.xcom_push(key, value) or BaseOperator.xcom_push(context, key, value)."""
    return argument(call, position + 1 if _on_self(call) else position, name)


def _reads_own_xcom(func: Function, call: ast.Call) -> bool:
    """A pull with no task_ids, or naming this task, reads what this task pushed."""
    task_ids = keyword(call, "task_ids")
    if task_ids is None:
        return len(call.args) <= (1 if _on_self(call) else 0)
    value = task_ids.value
    if isinstance(value, ast.Constant):
        return value.value == func.name
    return isinstance(value, ast.Attribute) and value.attr == "task_id"


def _after(src: Source, func: Function, call: ast.Call) -> str:
    key = _push_arg(call, 0, "key")
    value = _push_arg(call, 1, "value")
    key_text = src.segment(key) if key is not None else '"job_id"'
    value_text = src.segment(value) if value is not None else "job_id"
    line = src.lines_with(call, f"task_state_store.set({key_text}, {value_text})")
    return (
        store_preamble(func, "task_state_store")
        + line
        + "\n# on the retry: task_state_store.get("
        + key_text
        + ") finds it; keep xcom_push only for downstream tasks"
    )
