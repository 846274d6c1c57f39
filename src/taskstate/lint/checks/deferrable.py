"""TS408-TS409: deferrable operators that forget the job they submitted, triggers that keep
their progress where a triggerer restart loses it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.lint.checks.base import PROGRESS_KEY, Context
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, callee_name

# Calls that start something outside Airflow and hand back its id.
_SUBMIT_CALL = re.compile(
    r"(^|_)(submit|start|run|create|launch|trigger|execute|insert|invoke|begin)(_|$)"
    r"|^(submit|start|run|create|launch|trigger|execute|insert|invoke|begin)",
    re.IGNORECASE,
)
# Writes that make the id outlive the worker (any store's set / update / compare-and-set).
_PERSIST = frozenset({"set", "aset", "update", "aupdate", "compare_and_set", "acompare_and_set"})
_TRIGGER_BASES = frozenset({"BaseTrigger", "BaseEventTrigger"})


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS408-TS409 findings for one file: `defer()` before the job id is persisted, and
    trigger `run()` methods that keep progress on `self`."""
    if ".defer(" in src.text:
        for func in src.functions:
            if func.cls is not None:
                yield from _defer_before_persist(src, ctx, func)
    if "Trigger" in src.text:
        triggers = {name for name, cls in src.classes.items() if _is_trigger(src, cls)}
        for func in src.functions:
            if func.cls is not None and func.cls.name in triggers and func.name == "run":
                yield from _progress_in_self(src, ctx, func)


# -- TS408 --------------------------------------------------------------------------------


def _defer_before_persist(src: Source, ctx: Context, func: Function) -> Iterator[Finding]:
    submitted: dict[str, ast.Assign] = {}  # name -> the assignment from a submit-like call
    for stmt in _statements(func.node):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            name = callee_name(stmt.value)
            for target in stmt.targets:
                if isinstance(target, ast.Name) and name and _SUBMIT_CALL.search(name):
                    submitted[target.id] = stmt
        for call in _calls(stmt):
            callee = call.func
            if isinstance(callee, ast.Attribute) and callee.attr in _PERSIST:
                for name in _names(call):
                    submitted.pop(name, None)  # saved: safe from here on
            if _is_self_defer(call):
                lost = [n for n in _names(call) if n in submitted]
                if lost:
                    yield _ts408(src, ctx, func, call, lost[0], submitted[lost[0]])
                    return


def _ts408(
    src: Source, ctx: Context, func: Function, defer: ast.Call, name: str, submit: ast.Assign
) -> Finding:
    submit_line = src.lines_of(submit, limit=1)
    params = func.param_names()
    context = params[1] if len(params) > 1 else "context"
    return ctx.finding(
        src,
        "TS408",
        defer,
        cls=func.cls.name if func.cls else "",
        method=func.name,
        name=name,
        before=f"{submit_line}\n...\n{src.lines_of(defer, limit=3)}",
        after=(
            f"{submit_line}\n"
            f'{context}["task_state_store"].set("{name}", {name}, retention=NEVER_EXPIRE)\n'
            f"{src.lines_of(defer, limit=3)}\n"
            "# and on the next try, defer on the stored id instead of submitting; or let\n"
            "# taskstate's ResumableJobMixin do both: return self.execute_deferrable(context)\n"
            "# with submit_job() and defer_job(external_id, context)"
        ),
    )


def _statements(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements of a function body in source order, nested blocks included (not nested
    functions: they run later, if at all)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.stmt):
            yield child
        yield from _statements(child)


def _calls(stmt: ast.stmt) -> Iterator[ast.Call]:
    """The calls a statement makes itself (not those of the statements nested in it)."""
    todo: list[ast.AST] = [c for c in ast.iter_child_nodes(stmt) if not isinstance(c, ast.stmt)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call):
            yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.stmt))


def _is_self_defer(call: ast.Call) -> bool:
    callee = call.func
    return (
        isinstance(callee, ast.Attribute)
        and callee.attr == "defer"
        and isinstance(callee.value, ast.Name)
        and callee.value.id == "self"
    )


def _names(call: ast.Call) -> set[str]:
    """Every plain name used in the call's arguments (a trigger built inline included)."""
    args = [*call.args, *(kw.value for kw in call.keywords)]
    return {n.id for arg in args for n in ast.walk(arg) if isinstance(n, ast.Name)}


# -- TS409 --------------------------------------------------------------------------------


def _is_trigger(src: Source, cls: ast.ClassDef) -> bool:
    for base in cls.bases:
        qual = src.qualname(base)
        name = qual.split(".")[-1] if qual else getattr(base, "id", None)
        if name in _TRIGGER_BASES:
            return True
    return False


def _progress_in_self(src: Source, ctx: Context, func: Function) -> Iterator[Finding]:
    if _uses_state(func.node):
        return
    for node in ast.walk(func.node):
        if not isinstance(node, (ast.While, ast.For, ast.AsyncFor)):
            continue
        for inner in ast.walk(node):
            attr = _self_progress(inner)
            if attr is not None:
                line = src.lines_of(inner, limit=1)
                yield ctx.finding(
                    src,
                    "TS409",
                    inner,
                    cls=func.cls.name if func.cls else "",
                    attr=attr,
                    before=line,
                    after=(
                        "class ...(TriggerStateMixin, BaseTrigger):  "
                        "# from taskstate.airflow.triggers\n"
                        f'    {attr} = await self.task_state_store.aget("{attr}", start)  '
                        "# before the loop\n"
                        f"    {line}\n"
                        f'    await self.task_state_store.aset("{attr}", self.{attr})'
                    ),
                )
                return


def _self_progress(node: ast.AST) -> str | None:
    """`self.x += ...`, or `self.<cursor-like name> = ...`: progress kept on the instance."""
    targets: list[ast.expr]
    if isinstance(node, ast.AugAssign):
        targets = [node.target]
    elif isinstance(node, ast.Assign):
        targets = node.targets
    else:
        return None
    for target in targets:
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and (isinstance(node, ast.AugAssign) or PROGRESS_KEY.search(target.attr))
        ):
            return target.attr
    return None


def _uses_state(node: ast.AST) -> bool:
    """Anything that reaches a state store (or Airflow's asset state) from run()."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr in (
            "task_state_store",
            "asset_state_store",
        ):
            return True
    return False
