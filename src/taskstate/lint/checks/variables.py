"""TS1xx: Airflow Variables used as task state, watermarks, or a hand-rolled job reconnect."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

from taskstate.lint.checks.base import (
    JOB_ID_KEY,
    PROGRESS_KEY,
    WATERMARK_KEY,
    Context,
    shown,
    store_preamble,
)
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, argument, literal_text

_NONE: tuple[set[int], set[str]] = (set(), set())
_READS = frozenset({"get"})
_WRITES = frozenset({"set", "update", "setdefault"})


@dataclass
class _Use:
    call: ast.Call
    method: str
    key: ast.expr | None
    key_text: str  # literal text with {} for formatted parts, or the expression's source

    @property
    def write(self) -> bool:
        return self.method in _WRITES


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS1xx findings for one file: Variables read in templates, and Variables used in task
    code as state, watermarks, or job ids."""
    if "var.value." in src.text or "var.json." in src.text:
        yield from _templates(src, ctx)
    if "Variable" not in src.text:
        return
    uses_by_func: dict[int, list[_Use]] = {}
    funcs: dict[int, Function | None] = {}
    for call, func in src.calls:
        use = _variable_use(src, call)
        if use is not None:
            uses_by_func.setdefault(id(func), []).append(use)
            funcs[id(func)] = func
    for key, uses in uses_by_func.items():
        yield from _check_function(src, ctx, funcs[key], uses)


def _templates(src: Source, ctx: Context) -> Iterator[Finding]:
    """`"... > '{{ var.value.last_processed_at }}'"`: a Variable read into a templated field."""
    docstrings = {
        id(owner.body[0].value)
        for owner in ast.walk(src.tree)
        if isinstance(owner, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and owner.body
        and isinstance(owner.body[0], ast.Expr)
    }
    for node in ast.walk(src.tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in docstrings:
            continue
        for match in _TEMPLATE_VARIABLE.finditer(node.value):
            key = match.group(1)
            if not (
                WATERMARK_KEY.search(key) or PROGRESS_KEY.search(key) or JOB_ID_KEY.search(key)
            ):
                continue
            store = (
                "asset_state_store[MY_ASSET]" if WATERMARK_KEY.search(key) else ("task_state_store")
            )
            yield ctx.finding(
                src,
                "TS105",
                node,
                key=f"{key!r} (in a template)",
                before=src.lines_of(node, limit=3),
                after=(
                    f"# read it inside the task instead of templating it in:\n"
                    f'value = {store}.get("{key}")'
                ),
            )


_TEMPLATE_VARIABLE = re.compile(r"\{\{[^}]*?\bvar\.(?:value|json)\.([A-Za-z_]\w*)")


def _variable_use(src: Source, call: ast.Call) -> _Use | None:
    callee = call.func
    if not isinstance(callee, ast.Attribute) or callee.attr not in _READS | _WRITES:
        return None
    if not src.is_airflow(callee.value, "Variable"):
        return None
    key = argument(call, 0, "key")
    text = literal_text(src, key)
    if text is None:
        text = src.segment(key) if key is not None else ""
    return _Use(call, callee.attr, key, text)


def _check_function(
    src: Source, ctx: Context, func: Function | None, uses: list[_Use]
) -> Iterator[Finding]:
    in_task = func is not None and func.is_task
    done: set[int] = set()
    if func is not None and in_task:
        for finding, consumed in _reconnect_or_submit(src, ctx, func, uses):
            done.update(consumed)
            yield finding
    written_keys = {use.key_text for use in uses if use.write}
    derived = _derived_from_reads(func, uses) if func is not None else {}
    for use in uses:
        if id(use.call) in done:
            continue
        key = shown(src, use.key)
        if use.write and WATERMARK_KEY.search(use.key_text):
            yield ctx.finding(
                src, "TS102", use.call, key=key, after=_watermark_after(src, func, use)
            )
        elif not in_task or func is None:
            continue
        elif use.write:
            value = argument(use.call, 1, "value")
            stateful = (
                PROGRESS_KEY.search(use.key_text)
                or JOB_ID_KEY.search(use.key_text)
                or (value is not None and _mentions(value, *derived.get(use.key_text, _NONE)))
            )
            code = "TS101" if stateful else "TS104"
            yield ctx.finding(src, code, use.call, key=key, after=_task_state_after(src, func, use))
        elif use.key_text not in written_keys and (
            PROGRESS_KEY.search(use.key_text)
            or JOB_ID_KEY.search(use.key_text)
            or WATERMARK_KEY.search(use.key_text)
        ):
            yield ctx.finding(
                src, "TS105", use.call, key=key, after=_task_state_after(src, func, use)
            )


def _derived_from_reads(func: Function, uses: list[_Use]) -> dict[str, tuple[set[int], set[str]]]:
    """Per Variable key: ids of the read calls and of the local names whose value comes from
    reading it (`cursor = Variable.get(K)`, `new = cursor + n`).

    A write whose value is built from a read of the same key is read-modify-write: state.
    Writing a constant after a read (set-if-absent) is initialising configuration.
    """
    derived: dict[str, set[int]] = {}
    reads: dict[int, str] = {}
    for use in uses:
        if not use.write:
            reads[id(use.call)] = use.key_text
            derived.setdefault(use.key_text, set()).add(id(use.call))
    names: dict[str, set[str]] = {}
    assigns = sorted(func.assigns, key=lambda a: (a.lineno, a.col_offset))
    for _ in range(3):  # a few hops: cursor = get(K); new = cursor + n; set(K, new)
        for assign in assigns:
            for key, ids in derived.items():
                if _mentions(assign.value, ids, names.get(key, set())):
                    names.setdefault(key, set()).update(
                        t.id for t in assign.targets if isinstance(t, ast.Name)
                    )
    return {key: (ids, names.get(key, set())) for key, ids in derived.items()}


def _mentions(node: ast.expr, call_ids: set[int], names: set[str]) -> bool:
    return any(
        id(sub) in call_ids or (isinstance(sub, ast.Name) and sub.id in names)
        for sub in ast.walk(node)
    )


def _reconnect_or_submit(
    src: Source, ctx: Context, func: Function, uses: list[_Use]
) -> Iterator[tuple[Finding, set[int]]]:
    """`job_id = Variable.get(K)` ... `if job_id:` reconnect, else submit ... `Variable.set(K)`."""
    gets = {id(u.call): u for u in uses if not u.write and JOB_ID_KEY.search(u.key_text)}
    if not gets:
        return
    names: dict[str, _Use] = {}
    for assign in func.assigns:
        if isinstance(assign.value, ast.Call) and id(assign.value) in gets:
            for target in assign.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = gets[id(assign.value)]
    for branch in func.ifs:
        got = _tested_get(branch.test, gets, names)
        if got is None:
            continue
        sets = [u for u in uses if u.write and u.key_text == got.key_text]
        if not sets:
            continue
        after = _mixin_after(src, ctx, func, got, branch)
        first, last = got.call.lineno, branch.end_lineno or branch.lineno
        before = "\n".join(src.lines[first - 1 : min(last, first + 9)])
        finding = ctx.finding(
            src,
            "TS103",
            branch,
            key=shown(src, got.key),
            before=textwrap.dedent(before),
            after=after,
        )
        yield finding, {id(got.call), *(id(u.call) for u in sets)}
        return


def _tested_get(test: ast.expr, gets: dict[int, _Use], names: dict[str, _Use]) -> _Use | None:
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and id(node) in gets:
            return gets[id(node)]
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
    return None


def _store_call(src: Source, use: _Use, store: str) -> str:
    """`Variable.get("k", default_var=0)` -> `task_state_store.get("k", default=0)`."""
    call = use.call
    key = src.segment(use.key) if use.key is not None else '"key"'
    if use.write:
        value = argument(call, 1, "value")
        return f"{store}.set({key}, {src.segment(value) if value is not None else '...'})"
    # Airflow 2 says default_var=, the Airflow 3 SDK says default=
    default = argument(call, 1, "default_var") or argument(call, 1, "default")
    return f"{store}.get({key}" + (f", default={src.segment(default)})" if default else ")")


def _task_state_after(src: Source, func: Function, use: _Use) -> str:
    line = src.lines_with(use.call, _store_call(src, use, "task_state_store"))
    return store_preamble(func, "task_state_store") + line


def _watermark_after(src: Source, func: Function | None, use: _Use) -> str:
    asset = "MY_ASSET"
    if func is not None:
        for name in ("outlets", "inlets"):
            declared = func.task_keywords().get(name)
            if isinstance(declared, ast.List) and declared.elts:
                asset = src.segment(declared.elts[0])
                break
    key = '"watermark"' if "{}" in use.key_text or use.key is None else src.segment(use.key)
    value = argument(use.call, 1, "value")
    value_text = src.segment(value) if value is not None else "new_watermark"
    write = f"asset_state_store[{asset}].set({key}, {value_text})"
    if func is None or not func.is_task or func.cls is not None:
        return f"# in the task that loads {asset}, declared in its inlets and outlets:\n{write}"
    return (
        f"@task(inlets=[{asset}], outlets=[{asset}])\n"
        f"def {func.name}(asset_state_store=None):\n"
        f"    {write}"
    )


def _mixin_after(src: Source, ctx: Context, func: Function, got: _Use, branch: ast.If) -> str:
    if func.cls is not None:
        cls = func.cls.name
    else:
        cls = "".join(part.title() for part in func.name.split("_")) + "Operator"
    submit = "..."
    for node in ast.walk(ast.Module(body=branch.orelse, type_ignores=[])):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and not _is_variable_call(src, node.value)
        ):
            submit = src.segment(node.value)
            break
    key = literal_text(src, got.key) or "job_id"
    return (
        f"{ctx.version.mixin_import()}\n\n"
        f"class {cls}(ResumableJobMixin, BaseOperator):\n"
        f'    external_id_key = "{key}"\n\n'
        "    def execute(self, context):\n"
        "        return self.execute_resumable(context)\n\n"
        "    def submit_job(self, context):\n"
        f"        return {submit}\n\n"
        "    # ... get_job_status, is_job_active, is_job_succeeded, poll_until_complete,\n"
        "    # get_job_result: the reconnect logic moves out of execute()"
    )


def _is_variable_call(src: Source, call: ast.Call) -> bool:
    callee = call.func
    return isinstance(callee, ast.Attribute) and src.is_airflow(callee.value, "Variable")
