"""Focused DAG for Airflow 3.3+: the native store is in charge, and DAG code written against
taskstate keeps working. The task reports what it saw to a JSON file (no taskstate store)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pendulum

from taskstate import NEVER_EXPIRE

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_coexist():
    @task
    def native(task_state_store=None):
        import airflow.sdk

        task_state_store.set("k", 1, retention=NEVER_EXPIRE)
        report = {
            "store_module": type(task_state_store).__module__,
            "never_expire_equal": NEVER_EXPIRE == airflow.sdk.NEVER_EXPIRE,
            "never_expire_same": NEVER_EXPIRE is airflow.sdk.NEVER_EXPIRE,
            "get": task_state_store.get("k"),
        }
        Path(os.environ["AIRFLOW_HOME"], "coexist.json").write_text(json.dumps(report))

    native()


ts_coexist()
