"""TS3xx: submit-and-poll split in two tasks; deferrable operators that do not say they wait."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.lint.checks.base import Context
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source, is_false, is_true, keyword

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
    for call, _func in src.calls:
        name = _callee_name(call)
        for param in _NO_WAIT:
            kw = keyword(call, param)
            if kw is not None and is_false(kw.value):
                note = f"; a separate sensor ({sensor}) polls it" if sensor else ""
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


def _callee_name(call: ast.Call) -> str | None:
    callee = call.func
    if isinstance(callee, ast.Name):
        return callee.id
    if isinstance(callee, ast.Attribute):
        return callee.attr
    return None


def _durable_note(call: ast.Call) -> str:
    return "" if keyword(call, "durable") else "  # and durable=True where the operator has it"
