"""Try 1 of each task SIGKILLs its own task process; Airflow retries; the retry must reconnect.

The skill's `MyBatchOperator` (its base-class order) against the tests' real job system
(tests/resumable/jobsystem.py, path in RESUMABLE_JOBSYSTEM, table in RESUMABLE_JOBS_DB). Each
try that returns writes a report to $VERSUS_OUT (the deployment driver collects them).
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, BaseOperator
except ImportError:  # Airflow 2
    from airflow.models.baseoperator import BaseOperator  # type: ignore[no-redef]
    from airflow.models.dag import DAG  # type: ignore[no-redef]

from taskstate import ResumableJobMixin


def _jobs() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ts_jobsystem", os.environ["RESUMABLE_JOBSYSTEM"])
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.JobSystem(os.environ["RESUMABLE_JOBS_DB"])


class MyBatchOperator(BaseOperator, ResumableJobMixin):
    external_id_key = "batch_job_id"

    def __init__(
        self, *, kill_at: str, dedupe: bool, use_find_job: bool, run_for: float = 2.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.kill_at = kill_at
        self.run_for = run_for
        self.dedupe = dedupe
        self.use_find_job = use_find_job

    def execute(self, context: Any) -> Any:
        how = "in the context"
        if context.get("task_state_store") is None:  # Airflow < 3.3 without the integration
            from taskstate import StateStore, TaskScope

            ti = context["ti"]
            scope = TaskScope(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
            context["task_state_store"] = StateStore().task_state(scope)
            how = "opened by the task"
        decision = self.resume_decision(context)
        result = self.execute_resumable(context)
        ti = context["ti"]
        report = {
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
            "try_number": int(ti.try_number),
            "logical": self._logical(context),
            "decision": decision.action.value,
            "recovered": decision.recovered,
            "store": f"{type(context['task_state_store']).__module__} ({how})",
            "result": result,
        }
        out = Path(os.environ["VERSUS_OUT"]) / f"{ti.task_id}.json"
        out.write_text(json.dumps(report))
        return result

    def _logical(self, context: Any) -> str:
        return f"{context['ti'].run_id}/{context['ti'].task_id}"

    def _die_on_first_try(self, context: Any, point: str) -> None:
        if self.kill_at == point and int(context["ti"].try_number) == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    def submit_job(self, context: Any) -> Any:
        job_id = _jobs().submit(
            self._logical(context),
            token=self.idempotency_token(context),
            dedupe=self.dedupe,
            run_for=self.run_for,
        )
        self._die_on_first_try(context, "after_accept")  # accepted; its id not saved yet
        return job_id

    def find_job(self, token: str, context: Any) -> Any:
        if not self.use_find_job:
            raise NotImplementedError
        return _jobs().find(token)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(_jobs().status(external_id))

    def is_job_active(self, status: str) -> bool:
        return status in ("PENDING", "RUNNING")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        while self.is_job_active(status := self.get_job_status(external_id, context)):
            if status == "RUNNING":
                self._die_on_first_try(context, "during_poll")
            time.sleep(0.1)
        if not self.is_job_succeeded(status):
            raise RuntimeError(f"job {external_id} ended {status}")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return _jobs().result(external_id)


with DAG(
    "ts_resumable_kill",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    MyBatchOperator(task_id="client_token", kill_at="after_accept", dedupe=True, use_find_job=False)
    MyBatchOperator(task_id="find_job", kill_at="after_accept", dedupe=False, use_find_job=True)
    # Long enough that the retry usually finds it still running (and reconnects).
    MyBatchOperator(
        task_id="during_poll", kill_at="during_poll", dedupe=True, use_find_job=False, run_for=15.0
    )
