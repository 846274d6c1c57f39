"""Eight map indices on Celery workers; on try 1 every odd index SIGKILLs itself after row 2's
checkpoint, and its retry (on whichever worker) resumes at row 3. Each processed row is
appended to a ledger so a row processed twice shows."""

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

ROWS = 5


@dag(start_date=datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_mapped8():
    # Retries beyond the planned kill absorb a loaded test machine's lost workers.
    @task(retries=4, retry_delay=timedelta(seconds=1))
    def part(index, **context):
        state = context["task_state_store"]
        ledger = Path(os.environ["AIRFLOW_HOME"]) / "mapped_ledger.jsonl"
        for row in range(state.get("cursor", default=0), ROWS):
            with ledger.open("a") as f:
                f.write(json.dumps([index, row]) + "\n")
            state.set("cursor", row + 1)
            if row == 2 and index % 2 and context["ti"].try_number == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        state.set("index", index)

    part.expand(index=list(range(8)))


ts_mapped8()
