"""The skill's §3 mapped example: every map index has its own `task_state_store`."""

from __future__ import annotations

from datetime import timedelta

from pendulum import datetime

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task

ROWS_PER_PARTITION = 5


@dag(start_date=datetime(2025, 1, 1), schedule=None, catchup=False)
def process_partitions():
    @task(retries=2, retry_delay=timedelta(seconds=1))
    def process_partition(partition_id, **context):
        task_state_store = context["task_state_store"]
        # Scoped to THIS index only — other indices have their own copy
        cursor = task_state_store.get("cursor", default=0)
        for row in range(cursor, ROWS_PER_PARTITION):
            print(f"partition {partition_id}: row {row}")
            new_cursor = row + 1
            task_state_store.set("cursor", new_cursor)
        task_state_store.set("partition_id", partition_id)

    process_partition.expand(partition_id=[0, 1, 2, 3])


process_partitions()
