"""Fencing stale tries, Airflow's side: which try of a task instance is running now.

The plugin hands `running_try` to the HTTP API (`Hosting.running_try`); the API refuses a
task-state write made with a task-instance token whose try number is not this one (409).
Reads the metadata database, which the api-server / webserver holds.
"""

from __future__ import annotations


def running_try(dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
    """The try number of the task instance if it is running, else None."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    query = select(TaskInstance.state, TaskInstance.try_number).where(
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.task_id == task_id,
        TaskInstance.map_index == map_index,
    )
    with create_session() as session:
        row = session.execute(query).one_or_none()
    if row is None or row[0] != TaskInstanceState.RUNNING:
        return None
    return int(row[1])
