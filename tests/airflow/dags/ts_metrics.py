"""Focused DAG: one task touches its state with every operation, so a `[metrics] statsd_on`
deployment receives taskstate's timers (tests/airflow/test_metrics_airflow.py)."""

from __future__ import annotations

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_metrics():
    @task
    def every_operation(task_state_store=None):
        task_state_store.set("k", 1)
        assert task_state_store.get("k") == 1
        task_state_store.update("k", lambda v: v + 1)
        assert not task_state_store.compare_and_set("k", 1, 5)  # a conflict: it holds 2
        task_state_store.delete("k")
        task_state_store.clear()

    every_operation()


ts_metrics()
