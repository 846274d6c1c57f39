"""One DAG run that lives through an upgrade from Airflow 3.2 (taskstate) to 3.3 (native store).

$UPGRADE_PHASE says where we are: "before" (Airflow 3.2.2 with taskstate: the job's poll dies,
so its task fails with the job in flight), "after" (Airflow 3.3.2, after migrate-to-airflow:
tasks rerun with `airflow tasks test` in the same DAG run), "s3" / "s3-read" (3.3.2
with taskstate.airflow.ObjectStorageStateBackend as [workers] state_store_backend: write and
read, then only read). Each task writes
what it saw to $UPGRADE_OUT/<task_id>[-<map_index>].json.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, BaseOperator, dag, task

try:  # Airflow 3.3+: its own mixin reads the migrated job id
    from airflow.sdk import ResumableJobMixin
except ImportError:
    from taskstate import ResumableJobMixin

ORDERS = Asset("upgrade_orders")
PHASE = os.environ.get("UPGRADE_PHASE", "")


def _report(context: Any, data: dict[str, Any]) -> None:
    ti = context["ti"]
    suffix = "" if ti.map_index in (None, -1) else f"-{ti.map_index}"
    Path(os.environ["UPGRADE_OUT"], f"{ti.task_id}{suffix}.json").write_text(json.dumps(data))


def _jobs() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ts_jobsystem", os.environ["RESUMABLE_JOBSYSTEM"])
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.JobSystem(os.environ["RESUMABLE_JOBS_DB"])


class UpgradeJobOperator(ResumableJobMixin, BaseOperator):
    external_id_key = "batch_job_id"

    def execute(self, context: Any) -> Any:
        stored = context["task_state_store"].get(self.external_id_key)
        result = self.execute_resumable(context)
        _report(context, {"stored_before": stored, "result": result,
                          "mixin": ResumableJobMixin.__module__})  # fmt: skip
        return result

    def submit_job(self, context: Any) -> Any:
        token = getattr(self, "idempotency_token", lambda c: None)(context)
        return _jobs().submit(f"upgrade/{context['ti'].run_id}", token=token, run_for=0.3)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(_jobs().status(external_id))

    def is_job_active(self, status: str) -> bool:
        return status in ("PENDING", "RUNNING")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if PHASE == "before":
            raise RuntimeError("simulated: the worker was lost while the job ran")
        jobs = _jobs()
        while self.is_job_active(jobs.status(external_id)):
            time.sleep(0.05)
        # Airflow 3.3.2's mixin returns this on reconnect: make it the result on every path.
        return self.get_job_result(external_id, context)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return _jobs().result(external_id)


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_upgrade():
    UpgradeJobOperator(task_id="submit", retries=0)

    @task
    def remember(n: int, task_state_store=None):
        _report(get_current_context(), {"before": task_state_store.get("item")})
        task_state_store.set("item", n * 10)

    remember.expand(n=[1, 2, 3])

    @task(outlets=[ORDERS])
    def write_asset(asset_state_store=None):
        if PHASE == "before":
            asset_state_store.set("watermark", "2025-01-01T00:00:00+00:00")

    @task(inlets=[ORDERS])
    def read_asset(asset_state_store=None):
        _report(get_current_context(), {"watermark": asset_state_store.get("watermark")})

    @task
    def offload(task_state_store=None):
        big = [{"row": i, "text": "x" * 20} for i in range(2000)]
        if PHASE == "s3":
            task_state_store.set("big", big)
            task_state_store.set("gone", [1])
            task_state_store.delete("gone")
            task_state_store.set("over", "first")
            task_state_store.set("over", "second")
            task_state_store.set("short", [2], retention=timedelta(seconds=1))
        elif PHASE != "s3-read":
            return
        _report(get_current_context(), {"big_back": task_state_store.get("big") == big,
                                        "over": task_state_store.get("over")})  # fmt: skip

    write_asset()
    read_asset()
    offload()


def get_current_context() -> Any:
    from airflow.sdk import get_current_context as current

    return current()


ts_upgrade()
