"""Focused DAG: what every task is given. Each task records what it saw in its own state;
tests/airflow/test_dags.py reads it back from the store."""

from __future__ import annotations

from datetime import timedelta

import pendulum

try:
    from airflow.sdk import Asset, BaseOperator, dag, task

    A = Asset(name="ts_a", uri="file:///ts/a")
    B = Asset(name="ts_b", uri="file:///ts/b")
    UNDECLARED = Asset(name="ts_undeclared", uri="file:///ts/undeclared")
except ImportError:  # Airflow 2
    from airflow.datasets import Dataset
    from airflow.decorators import dag, task
    from airflow.models.baseoperator import BaseOperator

    A = Dataset("file:///ts/a")
    B = Dataset("file:///ts/b")
    UNDECLARED = Dataset("file:///ts/undeclared")


def raised(fn) -> list:
    """[class name, is KeyError, is ValueError] of what fn raises, or ["ok"]."""
    try:
        fn()
    except Exception as exc:
        return [type(exc).__name__, isinstance(exc, KeyError), isinstance(exc, ValueError)]
    return ["ok"]


class Classic(BaseOperator):
    def execute(self, context):
        context["task_state_store"].set("seen", {"classic": True})


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_inject():
    @task
    def from_context(**context):
        ti = context["ti"]
        context["task_state_store"].set(
            "seen",
            {
                "ti": [ti.dag_id, ti.run_id, ti.task_id, ti.map_index],
                "asset_key": "asset_state_store" in context,
            },
        )

    @task
    def from_param(task_state_store=None, asset_state_store=None):
        task_state_store.set("seen", {"asset_param": asset_state_store is not None})

    @task(outlets=[A])
    def one_asset(task_state_store=None, asset_state_store=None):
        asset_state_store.set("k", "one")  # single-asset sugar
        task_state_store.set(
            "seen",
            {
                "by_index": asset_state_store[A].get("k"),
                "undeclared": raised(lambda: asset_state_store[UNDECLARED]),
            },
        )

    @task(inlets=[A], outlets=[B])
    def two_assets(task_state_store=None, asset_state_store=None):
        asset_state_store[B].set("k", "two")
        task_state_store.set(
            "seen",
            {
                "a_from_other_task": asset_state_store[A].get("k"),
                "ambiguous": raised(lambda: asset_state_store.get("k")),
            },
        )

    @task(retries=2, retry_delay=timedelta(seconds=0))
    def retried(**context):
        store = context["task_state_store"]
        tries = [*store.get("tries", default=[]), context["ti"].try_number]
        store.set("tries", tries)
        if len(tries) < 3:
            raise RuntimeError("failing on purpose, to be retried")

    @task
    def mapped(x, task_state_store=None):
        task_state_store.set("before", task_state_store.get("x", default=None) or "none")
        task_state_store.set("x", x)

    last = from_context() >> from_param() >> one_asset() >> two_assets() >> retried()
    last >> mapped.expand(x=["p", "q", "r"])
    last >> Classic(task_id="classic")


ts_inject()
