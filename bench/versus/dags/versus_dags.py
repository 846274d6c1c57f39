"""The benchmark's DAGs: the same code on Airflow 3.3.2 (native store) and on Airflow 2.x/3.2
with taskstate. Every task times its own store calls with `time.perf_counter` and writes one
JSON file into `$VERSUS_OUT`; the driver (bench/versus/) collects them. Parameters come from
the environment at run time: VERSUS_N (ops, records or checkpoints), VERSUS_OUT.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import Asset, dag, task
except ImportError:  # Airflow 2: a Dataset is what Airflow 3 calls an Asset
    from airflow.datasets import Dataset as Asset
    from airflow.decorators import dag, task

import pendulum

import airflow

BENCH_ASSET = Asset("versus_asset") if hasattr(Asset, "name") else Asset("versus://asset")
START = pendulum.datetime(2025, 1, 1, tz="UTC")
DAG_ARGS: dict[str, Any] = {"start_date": START, "schedule": None, "catchup": False}


def _n() -> int:
    return int(os.environ.get("VERSUS_N", "100"))


def _describe(store: object) -> str:
    return f"{type(store).__module__}.{type(store).__qualname__}"


def _task_store(context: Any) -> tuple[Any, str]:
    """The store the task was given; only if none was injected, taskstate opened directly."""
    store = context.get("task_state_store")
    if store is not None:
        return store, "injected"
    from taskstate import StateStore, TaskScope

    ti = context["ti"]
    scope = TaskScope(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    return StateStore().task_state(scope), "opened directly"


def _asset_store(context: Any) -> tuple[Any, str]:
    stores = context.get("asset_state_store")
    if stores is not None:
        return stores[BENCH_ASSET], "injected"
    from taskstate import AssetScope, StateStore

    name = getattr(BENCH_ASSET, "name", None)
    scope = AssetScope(name=name) if name else AssetScope(uri=BENCH_ASSET.uri)
    return StateStore().asset_state(scope), "opened directly"


def _emit(context: Any, result: dict[str, Any]) -> None:
    ti = context["ti"]
    result.update(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=ti.map_index,
        try_number=ti.try_number,
        pid=os.getpid(),
    )
    out = Path(os.environ["VERSUS_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{ti.dag_id}.{ti.task_id}.{ti.map_index}.{uuid.uuid4().hex[:8]}.json").write_text(
        json.dumps(result)
    )


def _set_then_get(store: Any, n: int) -> dict[str, list[float]]:
    clock = time.perf_counter
    sets, gets = [], []
    for i in range(n):
        t0 = clock()
        store.set(f"key{i}", {"i": i, "payload": "x" * 32})
        sets.append(clock() - t0)
    for i in range(n):
        t0 = clock()
        value = store.get(f"key{i}")
        gets.append(clock() - t0)
        if value["i"] != i:
            raise AssertionError(f"key{i} read back {value!r}")
    return {"set": sets, "get": gets}


# -- workload 1: per-op latency -------------------------------------------------------------


@dag(**DAG_ARGS)
def versus_task_ops() -> None:
    @task
    def task_ops(**context: Any) -> None:
        store, how = _task_store(context)
        samples = _set_then_get(store, _n())
        _emit(context, {"store": _describe(store), "how": how, "samples": samples})

    task_ops()


@dag(**DAG_ARGS)
def versus_asset_ops() -> None:
    @task(outlets=[BENCH_ASSET])
    def asset_ops(**context: Any) -> None:
        store, how = _asset_store(context)
        samples = _set_then_get(store, _n())
        _emit(context, {"store": _describe(store), "how": how, "samples": samples})

    asset_ops()


# -- workload 2: the skill's etl_with_checkpoint ----------------------------------------------


def fetch_records_after(cursor: int) -> list[dict[str, Any]]:
    return [{"id": i, "amount": i % 97} for i in range(cursor + 1, _n() + 1)]


def process(record: dict[str, Any]) -> None:
    record["amount"] *= 2


@dag(**DAG_ARGS)
def versus_etl_with_checkpoint() -> None:
    @task(retries=3)
    def process_records(**context: Any) -> None:
        started = time.perf_counter()
        task_state_store, how = _task_store(context)
        cursor = task_state_store.get("last_cursor", default=0)
        records = fetch_records_after(cursor)
        for record in records:
            process(record)
            cursor = record["id"]
            task_state_store.set("last_cursor", cursor)  # checkpoint after each record
        wall = time.perf_counter() - started
        if task_state_store.get("last_cursor") != _n():
            raise AssertionError("the last checkpoint was not read back")
        _emit(
            context,
            {
                "store": _describe(task_state_store),
                "how": how,
                "wall": wall,
                "records": len(records),
            },
        )

    process_records()


# -- workload 3: a mapped task, each index checkpointing ----------------------------------------


@dag(**DAG_ARGS)
def versus_mapped_partitions() -> None:
    @task(retries=2)
    def process_partition(partition_id: int, **context: Any) -> None:
        started = time.perf_counter()
        task_state_store, how = _task_store(context)
        cursor = task_state_store.get("cursor", default=0)
        for new_cursor in range(cursor + 1, _n() + 1):
            task_state_store.set("cursor", new_cursor)
        wall = time.perf_counter() - started
        _emit(
            context,
            {
                "store": _describe(task_state_store),
                "how": how,
                "wall": wall,
                "partition": partition_id,
            },
        )

    process_partition.expand(partition_id=list(range(8)))


versus_task_ops()
versus_asset_ops()
versus_etl_with_checkpoint()
versus_mapped_partitions()


# -- workload 5: crash scenarios of the resumable-job mixin ------------------------------------
#
# A mapped operator, one logical job per map index, against the tests' real job system
# (tests/resumable/jobsystem.py: a SQLite job table advanced by its own worker process).
# Try 1 SIGKILLs its own task process at the chosen point; Airflow retries; the try that
# returns writes the value execute_resumable() returned.

try:  # Airflow 3.3+: the native mixin; before: ours
    from airflow.sdk import ResumableJobMixin
except ImportError:
    from taskstate import ResumableJobMixin
try:
    from airflow.sdk import BaseOperator
except ImportError:
    from airflow.models.baseoperator import BaseOperator

CRASH_JOBS = int(os.environ.get("VERSUS_CRASH_JOBS", "20"))
# Airflow 2's scheduler takes the killed try for a zombie too and hands its failure to the DAG
# processor, which handles it tens of seconds later (44 s seen): by then an immediate retry is
# running, and the stale callback sets its state back to scheduled, which SIGTERMs it — each
# kill burned up to three tries and a job ran out of them. Its retry waits until the callback
# has landed (Airflow's own default retry_delay is 300 s); Airflow 3 retries at once.
RETRY_DELAY = timedelta(seconds=60 if airflow.__version__.startswith("2.") else 0)
# How long a job runs once started: the poll-kill case needs it still running on the retry.
RUN_FOR = {"after_submit": 1.0, "during_poll": float(os.environ.get("VERSUS_POLL_JOB_S", "120"))}


def _job_system() -> Any:
    import importlib.util

    path = os.environ["VERSUS_JOBSYSTEM"]
    spec = importlib.util.spec_from_file_location("versus_jobsystem", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _die() -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


class VersusBatchOperator(ResumableJobMixin, BaseOperator):
    """The skill's MyBatchOperator against the test job system, with a kill point on try 1.

    On taskstate it passes the mixin's idempotency token with the submission (the job system
    dedupes by it, like Databricks' idempotency_token) and implements `find_job`; Airflow
    3.3.2's mixin has neither, so there it submits without a token.
    """

    external_id_key = "versus_job_id"

    def __init__(self, *, job: int, kill_at: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.kill_at = kill_at
        self._module: Any = None
        self._client: Any = None

    def _jobs(self) -> Any:
        if self._client is None:
            self._module = _job_system()
            self._client = self._module.JobSystem(os.environ["VERSUS_JOBS_DB"])
        return self._client

    def _first_try(self, context: Any) -> bool:
        return int(context["ti"].try_number) == 1

    def execute(self, context: Any) -> Any:
        how = "injected"
        if context.get("task_state_store") is None:
            from taskstate import StateStore, TaskScope

            ti = context["ti"]
            scope = TaskScope(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
            context["task_state_store"] = StateStore().task_state(scope)
            how = "opened directly"
        result = self.execute_resumable(context)
        _emit(
            context,
            {
                "store": _describe(context["task_state_store"]),
                "how": how,
                "mixin": ResumableJobMixin.__module__,
                "kill_at": self.kill_at,
                "logical": self._logical(context),
                "result": result,
            },
        )
        return result

    def _logical(self, context: Any) -> str:
        ti = context["ti"]
        return f"{ti.run_id}/{ti.map_index}"

    def submit_job(self, context: Any) -> Any:
        token_of = getattr(self, "idempotency_token", None)
        token = token_of(context) if token_of else None
        job_id = self._jobs().submit(
            self._logical(context), token=token, dedupe=True, run_for=RUN_FOR[self.kill_at]
        )
        if self.kill_at == "after_submit" and self._first_try(context):
            _die()  # the job system has the job; the mixin has not stored its id yet
        return job_id

    def find_job(self, token: str, context: Any) -> Any:
        return self._jobs().find(token)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(self._jobs().status(external_id))

    def is_job_active(self, status: str) -> bool:
        return status in ("PENDING", "RUNNING")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        while True:
            status = self.get_job_status(external_id, context)
            if status == "RUNNING" and self.kill_at == "during_poll" and self._first_try(context):
                _die()  # the id is stored and the job is running
            if not self.is_job_active(status):
                break
            time.sleep(0.2)
        if not self.is_job_succeeded(status):
            raise RuntimeError(f"job {external_id} ended {status}")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return self._jobs().result(external_id)


def _crash_dag(kill_at: str) -> None:
    @dag(dag_id=f"versus_crash_{kill_at}", max_active_tasks=CRASH_JOBS, **DAG_ARGS)
    def crash() -> None:
        VersusBatchOperator.partial(
            task_id="batch",
            kill_at=kill_at,
            # Airflow 2 can count one SIGKILL twice (two zombie callbacks): leave headroom.
            retries=3,
            retry_delay=RETRY_DELAY,
        ).expand(job=list(range(CRASH_JOBS)))

    crash()


_crash_dag("after_submit")
_crash_dag("during_poll")
