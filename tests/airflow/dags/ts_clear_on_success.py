"""Focused DAG: with `[state_store] clear_on_success`, success wipes the task's state and a
failure keeps it."""

from __future__ import annotations

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_clear_on_success():
    @task
    def succeeds(task_state_store=None):
        task_state_store.set("k", 1)

    @task(retries=0)
    def fails(task_state_store=None):
        task_state_store.set("k", 1)
        raise RuntimeError("failing on purpose: its state must stay")

    succeeds()
    fails()


ts_clear_on_success()
