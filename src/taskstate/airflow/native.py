"""Airflow 3.3+ with `[state_store] taskstate_mode = native`: Airflow's accessors are in charge.

Two things taskstate still does there, both from the cluster policy, in the task's process:

- A call to a method Airflow's accessor lacks (`update`, `compare_and_set`, `keys`, ...) fails
  at once with `NativeStoreMethodError` naming the method and the setting, instead of Airflow's
  bare `AttributeError`. It is a `__getattr__` on Airflow's accessor classes, which Python
  consults only for names the class does not have, so Airflow's own methods are untouched; the
  error subclasses `AttributeError`, so `getattr(store, "update", None)` still returns None.
- The task log warns once per DAG when taskstate's store holds state of that DAG that was never
  copied into Airflow's (`taskstate migrate-to-airflow`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NoReturn

from taskstate.errors import NativeStoreMethodError

# Airflow's accessor classes (airflow/sdk/execution_time/context.py, 3.3.x) -> what a task
# calls them in its context.
_ACCESSORS = {
    "TaskStateStoreAccessor": "task_state_store",
    "AssetStateStoreAccessor": "asset_state_store[ASSET]",
    "AssetStateStoreAccessors": "asset_state_store",
}
_CONTEXT_MODULE = "airflow.sdk.execution_time.context"
# What taskstate's accessors offer beyond Airflow's (for the message's advice).
_TASKSTATE_ONLY = frozenset(
    {"update", "compare_and_set", "keys", "items", "aget", "aset", "adelete", "aclear"}
)


def _missing(accessor: str) -> Any:
    def __getattr__(self: object, name: str) -> NoReturn:
        if name.startswith("_"):  # copy/pickle/Jinja probes: the usual AttributeError
            raise AttributeError(name)
        if name in _TASKSTATE_ONLY:
            hint = (
                f"{name}() is taskstate's; set [state_store] taskstate_mode = taskstate to keep "
                "taskstate's accessors on Airflow 3.3+, or rewrite the call with get/set"
            )
        else:
            hint = "Airflow's accessor has get, set, delete and clear"
        raise NativeStoreMethodError(
            f"{accessor}.{name}: Airflow's own state store is in charge "
            f"([state_store] taskstate_mode = native, the default on Airflow 3.3+) and has no "
            f"{name!r}; {hint}. `taskstate lint` finds these calls before deploy"
        )

    return __getattr__


def guard_native_accessors() -> None:
    """Give Airflow's accessor classes a `__getattr__` that names the setting (idempotent)."""
    try:
        module = importlib.import_module(_CONTEXT_MODULE)
    except ImportError:  # not a 3.3 task SDK: nothing to guard
        return
    for cls_name, accessor in _ACCESSORS.items():
        cls = getattr(module, cls_name, None)
        if isinstance(cls, type) and "__getattr__" not in vars(cls):
            cls.__getattr__ = _missing(accessor)  # type: ignore[attr-defined]


# DAGs this process has checked already (a worker process may run many tasks of one DAG).
_CHECKED: set[str] = set()


class WarnUnmigrated:
    """`on_execute_callback` in native mode: warn once per DAG and process when taskstate holds
    state of this DAG that `taskstate migrate-to-airflow` never copied."""

    def __call__(self, context: Mapping[str, Any]) -> None:
        """The first time this process runs a task of the DAG, warn in the task's log if
        taskstate holds unmigrated state of it; a store that cannot be read is no warning."""
        ti = context["ti"]
        if ti.dag_id in _CHECKED:
            return
        _CHECKED.add(ti.dag_id)
        try:
            from taskstate.airflow.migrate import unmigrated_summary

            summary = unmigrated_summary(ti.dag_id)
        except Exception:  # taskstate unused or unreachable here: nothing to warn about
            return
        if summary is not None:
            context["task"].log.warning("taskstate: %s", summary)

    def __repr__(self) -> str:
        return "taskstate.airflow.native.WarnUnmigrated"
