"""TS3xx: submit-and-poll split in two tasks; deferrable operators that do not say they wait."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, is_false, is_true, keyword

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
    sensor = _first_sensor(src)
    for call, func in src.calls:
        name = _callee_name(call)
        for param in _NO_WAIT:
            kw = keyword(call, param)
            # without a sensor in the file it is fire-and-forget, not the split this rule is about
            if kw is not None and is_false(kw.value) and sensor is not None:
                linked = _linked_sensor(src, call, func)
                note = (
                    f"; sensor {linked} polls it"
                    if linked
                    else f"; a separate sensor ({sensor}) may poll it"
                )
                yield ctx.finding(
                    src,
                    "TS301",
                    call,
                    operator=name or "this call",
                    param=param,
                    sensor_note=note,
                    before=src.excerpt(call, kw),
                    after=src.excerpt(call, kw, f"{param}=True") + _durable_note(call),
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
                    call,
                    operator=name,
                    before=src.excerpt(call, deferrable),
                    after=src.excerpt(call, deferrable, text),
                )
    if sensor is None:
        return
    for func in src.functions:
        if func.is_task and func.cls is None and _SUBMIT_TASK.search(func.name):
            yield ctx.finding(
                src,
                "TS302",
                func.node,
                task=func.name,
                sensor=sensor,
                before=src.lines_of(func.node, limit=4),
                after=(
                    "# one task that submits and waits, crash-safe across retries:\n"
                    f"# submit in a ResumableJobMixin operator (submit_job) and poll there,\n"
                    '# or keep the split with a mode="reschedule" sensor and make downstream\n'
                    f"# tasks depend on {sensor}, not on {func.name}"
                ),
            )


def _first_sensor(src: Source) -> str | None:
    for call, _func in src.calls:
        name = _callee_name(call)
        if name and name.endswith("Sensor"):
            return name
    for func in src.functions:
        if func.task_decorator is not None:
            dec = func.task_decorator
            target = dec.func if isinstance(dec, ast.Call) else dec
            if isinstance(target, ast.Attribute) and target.attr == "sensor":
                return func.name
            if func.cls is None and _POLL_TASK.search(func.name):
                return func.name
    return None


def _linked_sensor(src: Source, submit: ast.Call, func: Function | None) -> str | None:
    """The sensor that reads this submit's result (`submit.output`, XComArg, its task_id)."""
    variable = _assigned_to(src, submit, func)
    task_id = keyword(submit, "task_id")
    task_id_text = (
        task_id.value.value
        if task_id is not None and isinstance(task_id.value, ast.Constant)
        else None
    )
    for call, sensor_func in src.calls:
        name = _callee_name(call)
        if not name or not name.endswith("Sensor"):
            continue
        for node in ast.walk(call):
            if variable and isinstance(node, ast.Name) and node.id == variable:
                return _assigned_to(src, call, sensor_func) or name
            if (
                isinstance(task_id_text, str)
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and (f"'{task_id_text}'" in node.value or f'"{task_id_text}"' in node.value)
            ):
                return _assigned_to(src, call, sensor_func) or name
    return None


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


def _callee_name(call: ast.Call) -> str | None:
    callee = call.func
    if isinstance(callee, ast.Name):
        return callee.id
    if isinstance(callee, ast.Attribute):
        return callee.attr
    return None


def _durable_note(call: ast.Call) -> str:
    return "" if keyword(call, "durable") else "  # and durable=True where the operator has it"
