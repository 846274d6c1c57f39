"""Airflow 3.3+: code written against taskstate's accessors (`update`, `compare_and_set`) under
`[state_store] taskstate_mode` = native (fails, naming the method and the setting) or
taskstate (runs on taskstate's accessors). Reports what it saw to $AIRFLOW_HOME/mode.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_mode():
    @task
    def atomic(task_state_store=None):
        report = {
            "module": type(task_state_store).__module__,
            "has_update": getattr(task_state_store, "update", None) is not None,
        }
        Path(os.environ["AIRFLOW_HOME"], "mode.json").write_text(json.dumps(report))
        report["n"] = task_state_store.update("n", lambda v: v + 1, default=0)
        report["cas"] = task_state_store.compare_and_set("owner", None, "me")
        Path(os.environ["AIRFLOW_HOME"], "mode.json").write_text(json.dumps(report))

    atomic()


ts_mode()
