"""Airflow 3.3.2's own deferrable path under the kill points of the deferrable kill DAG
(tests/airflow/resumable_dags/ts_deferrable_kill.py), for bench/deferrable_scheduler.py.

Amazon's `RedshiftDataOperator` and `GlueJobOperator` (apache-airflow-providers-amazon from
the pinned lock, unchanged; the two of its operators that subclass Airflow 3.3.2's
`ResumableJobMixin` and have a deferrable mode) with `deferrable=True` against the tests' AWS
server on loopback (tests/aws_server.py). Meant for a deployment without taskstate, so that
`task_state_store` is Airflow's own. Each operator gets two tasks, as the kill DAG has:

- `accept_then_complete`: try 1 SIGKILLed once the service accepted the job (its id not handed
  to a trigger); try 2 SIGKILLed in `execute_complete` with the result in hand; try 3 runs;
- `defer_then_trigger`: try 1 SIGKILLed just before `defer()` (upstream saves no id, so the
  point after persisting is this one); try 2 defers and the bench SIGKILLs the triggerer while
  the trigger polls (`<run_id>.<task>.deferred` tells it the try deferred).

The subclasses add only the kill points and a report; submit, defer, trigger and completion
are the provider's. A logical job is `<run_id>|<task_id>`, named in the SQL or the Glue run's
`--logical` argument, which is what the server's ledger counts jobs by.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.operators.glue import GlueJobOperator
from airflow.providers.amazon.aws.operators.redshift_data import RedshiftDataOperator
from airflow.sdk import DAG

OUT = Path(os.environ.get("VERSUS_OUT", "/tmp"))


class _Killed:
    """SIGKILLs try N at `kill_at[N]`: after_accept, before_defer or during_complete."""

    kill_at: dict[int, str]
    submits: str  # the hook method that submits the job

    def _name(self, context: Any) -> str:
        return f"{context['ti'].run_id}.{context['ti'].task_id}"

    def _die(self, context: Any, point: str) -> None:
        if self.kill_at.get(int(context["ti"].try_number)) == point:
            with (OUT / f"{self._name(context)}.kills").open("a") as log:
                log.write(f"{int(context['ti'].try_number)} {point}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, context: Any) -> Any:
        hook = self.hook  # type: ignore[attr-defined]
        submit = getattr(hook, self.submits)

        def submitted(*args: Any, **kwargs: Any) -> Any:
            answer = submit(*args, **kwargs)
            self._die(context, "after_accept")
            return answer

        setattr(hook, self.submits, submitted)
        self._context = context
        return self._report(context, super().execute(context))  # type: ignore[misc]

    def defer(self, **kwargs: Any) -> Any:
        context = self._context
        self._die(context, "before_defer")
        with (OUT / f"{self._name(context)}.deferred").open("a") as log:
            log.write(f"{int(context['ti'].try_number)} {time.time()}\n")
        return super().defer(**kwargs)  # type: ignore[misc]

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        result = super().execute_complete(context, event)  # type: ignore[misc]
        self._die(context, "during_complete")  # the result in hand, not returned
        return self._report(context, result)

    def _report(self, context: Any, result: Any) -> Any:
        ti = context["ti"]
        report = {
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
            "try_number": int(ti.try_number),
            "logical": f"{ti.run_id}|{ti.task_id}",
            "result": result,
        }
        (OUT / f"{ti.task_id}.json").write_text(json.dumps(report))
        return result


class KilledRedshift(_Killed, RedshiftDataOperator):
    submits = "execute_query"

    def __init__(self, *, kill_at: dict[int, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kill_at = kill_at


class KilledGlue(_Killed, GlueJobOperator):
    submits = "initialize_job"

    def __init__(self, *, kill_at: dict[int, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kill_at = kill_at


TASKS = {  # task -> the kill point of each try, as in the kill DAG
    "accept_then_complete": {1: "after_accept", 2: "during_complete"},
    "defer_then_trigger": {1: "before_defer"},
}

with DAG(
    "ts_upstream_deferrable",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 3, "retry_delay": timedelta(seconds=0)},
):
    logical = "{{ run_id }}|{{ ti.task_id }}"
    for task, kill_at in TASKS.items():
        KilledRedshift(
            task_id=f"redshift_{task}",
            kill_at=kill_at,
            sql=f"SELECT '{logical}'",
            database="dev",
            cluster_identifier="analytics",
            db_user="etl",
            poll_interval=1,
            deferrable=True,
        )
        KilledGlue(
            task_id=f"glue_{task}",
            kill_at=kill_at,
            job_name=f"ts_{task}",
            script_location="s3://scripts/etl.py",
            script_args={"--logical": logical},
            iam_role_arn="arn:aws:iam::123456789012:role/glue",
            # Glue's default (1) would refuse a second run while the first still runs.
            concurrent_run_limit=4,
            waiter_delay=1,
            waiter_max_attempts=600,
            deferrable=True,
        )
