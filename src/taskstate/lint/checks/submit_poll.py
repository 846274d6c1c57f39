"""TS3xx: submit-and-poll split in two tasks; deferrable operators that do not say they wait."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.lint.checks.base import Context, with_note
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, callee_name, is_false, is_true, keyword

_NO_WAIT = ("wait_for_termination", "wait_for_completion")
# Operators whose constructor takes `wait_for_termination` next to `deferrable` (read from the
# provider sources: databricks 7.23, dbt-cloud 4.11, microsoft-azure 15.2). For other operators
# `deferrable=True` says nothing about waiting, so they are not flagged.
_WAIT_PARAM_OPERATORS = frozenset(
    {
        "DatabricksSubmitRunOperator",
        "DatabricksRunNowOperator",
        "DatabricksSQLStatementsOperator",
        "DatabricksNotebookOperator",
        "DatabricksTaskOperator",
        "DatabricksStartWarehouseOperator",
        "DatabricksStopWarehouseOperator",
        "DbtCloudRunJobOperator",
        "AzureDataFactoryRunPipelineOperator",
        "AzureSynapseRunPipelineOperator",
    }
)
_SUBMIT_TASK = re.compile(r"(^|_)submit(_|$)", re.IGNORECASE)
_POLL_TASK = re.compile(r"^(wait_for|poll|check)_|_sensor$", re.IGNORECASE)


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS3xx findings for one file: operators told not to wait with a sensor polling the job,
    and deferrable operators that do not say they wait."""
    sensor = _first_sensor(src)
    for call, func in src.calls:
        name = callee_name(call)
        for param in _NO_WAIT:
            kw = keyword(call, param)
            # without a sensor in the file it is fire-and-forget, not the split this rule is about
            if kw is not None and is_false(kw.value) and sensor is not None:
                task_id = keyword(call, "task_id")
                linked = _linked_sensor(
                    src,
                    call,
                    _assigned_to(src, call, func),
                    task_id.value.value
                    if task_id is not None
                    and isinstance(task_id.value, ast.Constant)
                    and isinstance(task_id.value.value, str)
                    else None,
                )
                note = (
                    f"; {linked} polls it"
                    if linked
                    else f"; a separate sensor ({sensor}) may poll it"
                )
                yield ctx.finding(
                    src,
                    "TS301",
                    kw,  # at the keyword: where the change (or a noqa) goes
                    operator=name or "this call",
                    param=param,
                    sensor_note=note,
                    before=src.excerpt(call, kw),
                    after=_durable_note(call, src.excerpt(call, kw, f"{param}=True")),
                )
        if name in _WAIT_PARAM_OPERATORS:
            deferrable = keyword(call, "deferrable")
            if (
                deferrable is not None
                and is_true(deferrable.value)
                and keyword(call, "wait_for_termination") is None
            ):
                text = src.segment(deferrable) + ", wait_for_termination=True"
                yield ctx.finding(
                    src,
                    "TS303",
                    deferrable,
                    operator=name,
                    before=src.excerpt(call, deferrable),
                    after=src.excerpt(call, deferrable, text),
                )
    if sensor is None:
        return
    for func in src.functions:
        if not (func.is_task and func.cls is None and _SUBMIT_TASK.search(func.name)):
            continue
        for call, caller in src.calls:
            if _task_name_called(call) != func.name:
                continue
            linked = _linked_sensor(src, call, _assigned_to(src, call, caller), func.name)
            if linked is None:
                continue
            yield ctx.finding(
                src,
                "TS302",
                func.node,
                task=func.name,
                sensor=linked,
                before=src.lines_of(func.node, limit=4),
                after=(
                    "# one task that submits and waits, crash-safe across retries:\n"
                    "# submit in a ResumableJobMixin operator (submit_job) and poll there,\n"
                    '# or keep the split with a mode="reschedule" sensor and make downstream\n'
                    f"# tasks depend on {linked}, not on {func.name}"
                ),
            )
            break


def _is_sensor_call(src: Source, call: ast.Call) -> bool:
    """An operator named *Sensor, or a call of a @task.sensor / wait_for_* task of this file."""
    name = callee_name(call)
    if not name:
        return False
    if name.endswith("Sensor"):
        return True
    if isinstance(call.func, ast.Name) and name in src.by_name:
        func = src.by_name[name]
        dec = func.task_decorator
        if dec is None:
            return False
        target = dec.func if isinstance(dec, ast.Call) else dec
        return (isinstance(target, ast.Attribute) and target.attr == "sensor") or bool(
            _POLL_TASK.search(name)
        )
    return False


def _first_sensor(src: Source) -> str | None:
    for call, _func in src.calls:
        if _is_sensor_call(src, call):
            return callee_name(call)
    return None


def _linked_sensor(
    src: Source, submit: ast.Call, variable: str | None, task_id: str | None
) -> str | None:
    """The sensor that reads a submit's result: `submit.output`, XComArg(submit), its task id,
    or the submit call itself passed to a sensor task."""
    quoted = (f"'{task_id}'", f'"{task_id}"') if task_id else ()
    for call, sensor_func in src.calls:
        if not _is_sensor_call(src, call):
            continue
        for node in ast.walk(call):
            if (
                node is submit
                or (variable and isinstance(node, ast.Name) and node.id == variable)
                or (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and any(q in node.value for q in quoted)
                )
            ):
                name = callee_name(call)
                assigned = _assigned_to(src, call, sensor_func)
                return f"{assigned} ({name})" if assigned and assigned != name else name
    return None


def _task_name_called(call: ast.Call) -> str | None:
    """`submit_job` in `submit_job(...)` and `submit_job.override(...)(...)`."""
    callee = call.func
    if (
        isinstance(callee, ast.Call)
        and isinstance(callee.func, ast.Attribute)
        and callee.func.attr == "override"
    ):
        callee = callee.func.value
    return callee.id if isinstance(callee, ast.Name) else None


def _assigned_to(src: Source, call: ast.Call, func: Function | None) -> str | None:
    if func is None:
        for name, value in src.values.items():
            if value is call:
                return name
        return None
    for assign in func.assigns:
        if assign.value is call and isinstance(assign.targets[0], ast.Name):
            return assign.targets[0].id
    return None


def _durable_note(call: ast.Call, after: str) -> str:
    if keyword(call, "durable"):
        return after
    return with_note(after, "and durable=True where the operator has it")
