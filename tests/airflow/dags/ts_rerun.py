"""Focused DAG: a re-run (after `airflow tasks clear`) starts state over unless the task keeps
it; a map index whose input changed starts over even then."""

from __future__ import annotations

import json
import os

import pendulum

from taskstate.airflow import keep_state_on_clear

try:
    from airflow.sdk import dag, get_current_context, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task
    from airflow.operators.python import get_current_context


def count_run(store) -> None:
    store.set("runs", store.get("runs", default=0) + 1)
    # Proves this run happened after the clear (a clear raises max_tries).
    store.set("max_tries", get_current_context()["ti"].max_tries)


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_rerun():
    @task
    def fresh(task_state_store=None):
        count_run(task_state_store)

    @task
    def kept(task_state_store=None):
        count_run(task_state_store)

    @task
    def work(item, task_state_store=None):
        task_state_store.set("first_item", task_state_store.get("first_item", default=item))
        count_run(task_state_store)

    fresh()
    keep_state_on_clear(kept())
    # The list is read when the file is parsed, so changing TS_ITEMS between a run and its
    # re-run changes what a map index holds, as editing the DAG would.
    keep_state_on_clear(work.expand(item=json.loads(os.environ.get("TS_ITEMS", '["a", "b"]'))))


ts_rerun()
