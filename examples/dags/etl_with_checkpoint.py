"""The skill's §3 example: a checkpoint per record, so a retry resumes where the last try stopped.

`fetch_records_after` and `process` stand in for a real source and sink: records 1..20, and a
ledger file that every processed record is appended to, so a record processed twice shows.
Set TASKSTATE_DEMO_KILL_AT=<record id> to have try 1 SIGKILL itself right after that record's
checkpoint (what `scripts/demo.sh` does); the retry resumes from the checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path

from pendulum import datetime

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task

RECORDS = 20


def ledger() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME", ".")) / "etl_ledger.jsonl"


def fetch_records_after(cursor: int) -> list[dict]:
    return [{"id": i, "amount": i * 10} for i in range(cursor + 1, RECORDS + 1)]


def process(record: dict) -> None:
    with ledger().open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def demo_crash_point(context: dict, cursor: int) -> None:
    if os.environ.get("TASKSTATE_DEMO_KILL_AT") == str(cursor) and context["ti"].try_number == 1:
        print(f"demo: SIGKILL after record {cursor} on try 1", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


@dag(start_date=datetime(2025, 1, 1), schedule="@daily", catchup=False)
def etl_with_checkpoint():
    @task(retries=3, retry_delay=timedelta(seconds=1))
    def process_records(**context):
        task_state_store = context["task_state_store"]  # injected, no setup needed
        cursor = task_state_store.get("last_cursor", default=0)
        print(f"try {context['ti'].try_number}: resuming after record {cursor}")
        records = fetch_records_after(cursor)
        for record in records:
            process(record)
            cursor = record["id"]
            task_state_store.set("last_cursor", cursor)  # checkpoint after each record
            demo_crash_point(context, cursor)

    process_records()


etl_with_checkpoint()
