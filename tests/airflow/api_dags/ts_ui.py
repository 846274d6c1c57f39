"""The state pages' DAG (tests/airflow/test_ui_airflow.py): `load` leaves keys to see, edit,
delete and clear; `export` is mapped, so the pages' map-index picker has indices to show."""

from __future__ import annotations

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_ui():
    @task
    def load(task_state_store=None, **context):
        task_state_store.set("offset", 48213)
        task_state_store.set("job", {"id": "emr-7f3a", "run_id": context["run_id"]})
        task_state_store.set("note", "written by the DAG run")

    @task
    def export(part, task_state_store=None):
        task_state_store.set("cursor", {"page": part})

    load() >> export.expand(part=[1, 2])


ts_ui()
