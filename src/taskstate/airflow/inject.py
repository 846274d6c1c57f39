"""The callbacks the cluster policy gives every task: state in, state out.

`InjectState` runs as the task's first `on_execute_callback`, in the process that runs the task,
with the very context dict `execute` gets (Airflow 2.10-3.2, every execution path: `dags test`,
`tasks test`, scheduler + executor). It adds `task_state_store` (and `asset_state_store` for a
task with assets), which also reaches a `@task` function's parameter of that name, since Airflow
passes context entries to the parameters that name them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any, NoReturn

from taskstate.airflow.assets import AssetStateStores, is_asset
from taskstate.airflow.attempts import (
    ATTEMPT_KEY,
    INPUT_KEY,
    Attempt,
    input_fingerprint,
    rerun_reason,
)
from taskstate.airflow.worker import prepare_task_store
from taskstate.errors import BackendError, ConfigError
from taskstate.scope import TaskScope
from taskstate.store import StateStore, task_writer
from taskstate.writers import Writer

_process_store: tuple[int, StateStore] | None = None


def process_store() -> StateStore:
    """One `StateStore` per process, opened on first use (and again in a forked child)."""
    global _process_store
    pid = os.getpid()
    if _process_store is None or _process_store[0] != pid:
        _process_store = (pid, StateStore())
    return _process_store[1]


def task_scope(ti: Any) -> TaskScope:
    """The scope of a task instance (a map index of None is -1: not mapped)."""
    map_index = ti.map_index if ti.map_index is not None else -1
    return TaskScope(ti.dag_id, ti.run_id, ti.task_id, map_index)


def ti_writer(ti: Any) -> Writer:
    """What a task instance's own writes record: the task instance and the try it runs."""
    tried = getattr(ti, "try_number", None)
    return task_writer(task_scope(ti), None if tried is None else int(tried))


class StoreUnavailable:
    """Stands in for a store that could not be opened, so the task fails where it uses it."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def __getattr__(self, name: str) -> NoReturn:
        if isinstance(self._error, ConfigError):  # says what to set: show it as it is
            raise ConfigError(str(self._error)) from self._error
        raise BackendError(
            f"taskstate could not open this task's state store: {self._error}; "
            "run `taskstate doctor` to check the settings and the backend"
        ) from self._error

    __getitem__ = __getattr__


class InjectState:
    """`on_execute_callback`: put the task's state stores into its context.

    `expanded` names the arguments `.expand()` maps over (None: not known before run time, as
    with `.expand_kwargs()`); their values are the input fingerprinted per map index.
    """

    def __init__(
        self, *, keep_state_on_clear: bool = False, expanded: tuple[str, ...] | None = None
    ) -> None:
        self.keep_state_on_clear = keep_state_on_clear
        self.expanded = expanded

    def __call__(self, context: MutableMapping[str, Any]) -> None:
        """Put the stores into `context` (a retry continues the state, a re-run or re-expansion
        starts it over); a store that cannot be opened fails the task where it is used."""
        task = context["task"]
        try:
            store = process_store()
            prepare_task_store(context, store)
            ti = context["ti"]
            writer = ti_writer(ti)  # its writes name this try
            state = store.task_state(task_scope(ti), writer=writer)
            reason = self._start_over_reason(store, state.scope, context)
            if reason is not None:
                state.clear()
                task.log.info("taskstate: starting this task's state over: %s", reason)
            context["task_state_store"] = state
            assets = [a for a in (*(task.inlets or ()), *(task.outlets or ())) if is_asset(a)]
            if assets:
                context["asset_state_store"] = AssetStateStores(store, assets, writer)
        except Exception as exc:
            # Airflow logs and swallows callback errors; leave a stand-in that fails loudly
            # where the task touches its state instead of a missing key.
            task.log.exception("taskstate: could not set up task_state_store")
            context["task_state_store"] = StoreUnavailable(exc)

    def _start_over_reason(
        self, store: StateStore, scope: TaskScope, context: Mapping[str, Any]
    ) -> str | None:
        ti = context["ti"]
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        now = Attempt(
            try_number=int(ti.try_number or 0),
            max_tries=int(ti.max_tries if ti.max_tries is not None else -1),
            run_started=None if started is None else str(started),
        )
        meta = store.meta(scope)
        reason = rerun_reason(meta.get(ATTEMPT_KEY), now)
        if reason is not None and self.keep_state_on_clear:
            context["task"].log.info(
                "taskstate: keeping this task's state although %s (keep_state_on_clear)", reason
            )
            reason = None
        meta.set(ATTEMPT_KEY, now.as_json())
        if scope.map_index >= 0:
            fingerprint = input_fingerprint(self._mapped_input(context["task"]))
            before = meta.get(INPUT_KEY)
            meta.set(INPUT_KEY, fingerprint)
            if reason is None and before is not None and before != fingerprint:
                reason = (
                    f"map index {scope.map_index} now holds a different input than on the "
                    "previous try (the mapped list changed), so its state belonged to another item"
                )
        return reason

    def _mapped_input(self, task: Any) -> dict[str, Any]:
        op_kwargs = getattr(task, "op_kwargs", None)
        if self.expanded is None:
            return dict(op_kwargs) if isinstance(op_kwargs, Mapping) else {}
        values: dict[str, Any] = {}
        for name in self.expanded:
            if isinstance(op_kwargs, Mapping) and name in op_kwargs:
                values[name] = op_kwargs[name]
            else:
                values[name] = getattr(task, name, None)
        return values

    def __repr__(self) -> str:
        return "taskstate.airflow.inject.InjectState"


class ClearOnSuccess:
    """`on_success_callback`: `[state_store] clear_on_success` wipes the task instance's state."""

    def __call__(self, context: Mapping[str, Any]) -> None:
        """Clear the task instance's state (its map index only) when the setting is on."""
        store = process_store()
        if not store.settings.clear_on_success:
            return
        ti = context["ti"]
        scope, writer = task_scope(ti), ti_writer(ti)  # the clear's version names this try
        store.clear_task(
            scope.dag_id, scope.run_id, scope.task_id, map_index=scope.map_index, writer=writer
        )

    def __repr__(self) -> str:
        return "taskstate.airflow.inject.ClearOnSuccess"
