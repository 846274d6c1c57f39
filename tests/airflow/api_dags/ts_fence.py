"""Fencing in a real deployment (tests/airflow/test_api_plugin.py): try 1 of `held` fails, and
try 2 runs until the test releases it over HTTP, so the test writes with a token for try 1
while try 2 is RUNNING."""

from __future__ import annotations

import time
from datetime import timedelta

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_fence():
    @task(retries=1, retry_delay=timedelta(seconds=1))
    def held(task_state_store=None, **context):
        try_number = context["ti"].try_number
        if try_number == 1:
            raise RuntimeError("try 1 fails on purpose: try 2 is the one left running")
        task_state_store.set("running", try_number)
        deadline = time.monotonic() + 300
        while task_state_store.get("release") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the test never released try 2")
            time.sleep(0.5)

    held()


ts_fence()
