"""Task instances for the client scenario (tests/airflow/test_api_compat.py): one plain task and
one mapped over two items. The tasks do nothing; the scenario writes their state over HTTP."""

from __future__ import annotations

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_api_scenario():
    @task
    def plain():
        return None

    @task
    def mapped(x):
        return x

    plain() >> mapped.expand(x=[1, 2])


ts_api_scenario()
