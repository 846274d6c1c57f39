"""Airflow cluster policy (entry point group `airflow.policy`): give every task its state.

Airflow applies `task_policy` to each task whenever a DAG file is parsed — by the DAG
processor, by `dags test` / `tasks test`, and by the worker process that runs the task — so
the callbacks below are in place wherever a task executes. On Airflow 3.3+ Airflow's own store
from taskstate.airflow import KEEP_STATE_ATTR, native, providers
"""

from __future__ import annotations

from typing import Any

from airflow.policies import hookimpl

from taskstate.airflow import KEEP_STATE_ATTR, native, providers
from taskstate.airflow.inject import ClearOnSuccess, InjectState
from taskstate.airflow.versions import native_store_active

providers.install()


@hookimpl  # type: ignore[untyped-decorator]  # pluggy's marker, untyped in Airflow
def task_policy(task: Any) -> None:
    """Airflow's cluster-policy hook, run on every task as its DAG is parsed: taskstate's
    callbacks, or with Airflow 3.3+'s own store in charge, the guard on its accessors and the
    unmigrated-state warning."""
    if native_store_active():
        native.guard_native_accessors()
        add_callback(task, "on_execute_callback", native.WarnUnmigrated())
        return
    attach(task)


def attach(task: Any) -> None:
    """Give a task (or mapped task) taskstate's callbacks: `InjectState` first among its execute
    callbacks, `ClearOnSuccess` among its success callbacks."""
    expanded: tuple[str, ...] | None = None
    if getattr(task, "partial_kwargs", None) is not None:  # a mapped task
        spec = task._get_specified_expand_input().value
        expanded = tuple(spec) if isinstance(spec, dict) else None
    inject = InjectState(
        keep_state_on_clear=bool(getattr(task, KEEP_STATE_ATTR, False)), expanded=expanded
    )
    add_callback(task, "on_execute_callback", inject, first=True)
    add_callback(task, "on_success_callback", ClearOnSuccess())


def add_callback(task: Any, name: str, callback: Any, *, first: bool = False) -> None:
    """Add `callback` to the task's `name` callbacks (`first`: before the others), keeping the
    DAG's own and never stacking two of the same type."""
    partial_kwargs: dict[str, Any] | None = getattr(task, "partial_kwargs", None)
    if partial_kwargs is not None:
        # A mapped task: callbacks go to partial_kwargs, whence each unmapped copy gets them.
        partial_kwargs[name] = _with(partial_kwargs.get(name), callback, first=first)
    else:
        setattr(task, name, _with(getattr(task, name, None), callback, first=first))


def _with(existing: Any, callback: Any, *, first: bool = False) -> list[Any]:
    callbacks = [] if existing is None else [existing] if callable(existing) else list(existing)
    # Parsing a DAG twice in one process must not stack the callbacks.
    callbacks = [c for c in callbacks if type(c) is not type(callback)]
    return [callback, *callbacks] if first else [*callbacks, callback]
