"""Fencing stale tries, Airflow's side: which try of a task instance is live now.

The plugin hands `running_try` to the HTTP API (`Hosting.running_try`); the API refuses a
task-state write made with a task-instance token whose try number is not this one (409).
Reads the metadata database, which the api-server / webserver holds.
"""

from __future__ import annotations

# A task instance that deferred is still its try: its trigger (in the triggerer) writes the
# task's state with that try's token until the event resumes the task on a worker, where the
# try number stays the same (Airflow does not count a resume as a new try).
LIVE_STATES = frozenset({"running", "deferred"})


def live_try(state: object, try_number: int) -> int | None:
    """The try number that may write, given a task instance's state and try number: the try
    itself while it runs or is deferred, else None (no try may write)."""
    if state is None or str(getattr(state, "value", state)) not in LIVE_STATES:
        return None
    return int(try_number)


def running_try(dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
    """The try number of the task instance if it is running or deferred, else None."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TaskInstance.state, TaskInstance.try_number).where(
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.task_id == task_id,
        TaskInstance.map_index == map_index,
    )
    with create_session() as session:
        row = session.execute(query).one_or_none()
    return None if row is None else live_try(row[0], row[1])
