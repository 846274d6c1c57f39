"""The Airflow integration. Importing this package does not import Airflow.

What a DAG author may use from here: `keep_state_on_clear`; a deployment on Airflow 3.3+:
`ObjectStorageStateBackend` (`[workers] state_store_backend`, loaded on first use). Everything
else is wired in by the cluster policy (`taskstate.airflow.policy`, entry point group
`airflow.policy`).
"""

from __future__ import annotations

from typing import Any

# The policy reads this attribute from the operator when the DAG file is parsed.
KEEP_STATE_ATTR = "taskstate_keep_state_on_clear"


def keep_state_on_clear(*tasks: Any) -> None:
    """Keep these tasks' state when their task instance (or DAG run) is cleared for a re-run.

    By default a clear starts the task's state over, because a re-run is a request to do the
    work again; retries always resume. Pass operators, `@task` call results or mapped tasks:

        load = load_orders()
        keep_state_on_clear(load)
    """
    for task in tasks:
        operator = getattr(task, "operator", task)  # an XComArg from calling a @task
        setattr(operator, KEEP_STATE_ATTR, True)


def __getattr__(name: str) -> Any:
    # Lazy, so `import taskstate.airflow` (the policy's import) does not load fsspec.
    if name == "ObjectStorageStateBackend":
        from taskstate.airflow.objectstore import ObjectStorageStateBackend

        return ObjectStorageStateBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KEEP_STATE_ATTR", "ObjectStorageStateBackend", "keep_state_on_clear"]
