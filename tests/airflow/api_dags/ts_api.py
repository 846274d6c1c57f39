"""The HTTP API's DAG: `writer` writes task and asset state that the test reads over HTTP;
`reader` waits for a key the test writes over HTTP, then records what it saw; `scratch` is a
task instance whose state the permission matrix writes, deletes and clears: an EmptyOperator,
which the scheduler marks done without starting a task (on 2.x an `airflow tasks run` process)."""

from __future__ import annotations

import time

import pendulum

try:
    from airflow.sdk import Asset, dag, task

    ORDERS = Asset(name="ts_api_orders", uri="file:///ts/api/orders")
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:  # Airflow 2
    from airflow.datasets import Dataset
    from airflow.decorators import dag, task
    from airflow.operators.empty import EmptyOperator

    ORDERS = Dataset("file:///ts/api/orders")


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_api():
    @task(outlets=[ORDERS])
    def writer(task_state_store=None, asset_state_store=None, **context):
        task_state_store.set("written_by_dag", {"run_id": context["run_id"], "n": 42})
        asset_state_store.set("watermark", context["run_id"])

    @task
    def reader(task_state_store=None):
        deadline = time.monotonic() + 240
        while (value := task_state_store.get("go")) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the key 'go' never arrived over HTTP")
            time.sleep(0.5)
        task_state_store.set("seen", value)

    writer() >> reader()
    EmptyOperator(task_id="scratch")


ts_api()
