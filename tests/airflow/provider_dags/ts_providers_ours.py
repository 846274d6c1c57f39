"""taskstate.providers' operators (subclasses of the installed providers' operators) against the
tests' services on loopback: moto for Athena, Batch and ECS (tests/aws_server.py), small fakes
of dbt Cloud and Airbyte (tests/job_services.py). Try 1 of each task is faulted at one point:

- `in_window`: the service accepted the job, its id is not saved yet (end of `submit_job`);
- `after_persist`: the id is saved, polling has not begun;
- `while_polling`: one status check into the wait, the job still running;
- `before_defer` (deferrable mode): the id is saved, `defer()` not reached; the retry defers on
  that job with the provider's own trigger and completes it from the task's state;
- `foreign_id` (no fault): the task's state holds, before it starts, the id of another client's
  job (`services["foreign"][operator]`) with an intent of another token, as state copied from
  elsewhere would: `verify_job` must refuse it, and the task runs its own job.

The fault is a SIGKILL of the task process under a scheduler, an exception under `dags test`:
TS_PROVIDER_FAULT = kill | raise | none. DAGs: `ts_providers_ours_each_point` (every kill point,
each operator once: 3.2's scheduler), `ts_providers_ours_sequential` (every kill point, one
operator of each provider package: 2.10's sequential executor), `ts_providers_ours_dags_test`
(every operator at every point but `while_polling`, which Batch has: `dags test` on 3.3) and
`ts_providers_ours_kills` (every
operator at the three kill points: the bench); with TS_PROVIDERS_UPSTREAM set, another,
`ts_providers_upstream`, runs the providers' own classes at the kill points. Where the services
are: the run's conf, else the TS_SERVICES environment variable (JSON: `aws`, `dbt`, `airbyte`,
`ca`, `out`, `released`), applied to the task process's environment (connections, the fake's
CA bundle) before the operator runs.

Each job names its logical job (`<run_id>|<task_id>`) in what the service records: the query,
the Batch job's parameters, the ECS container's environment, the dbt run's cause, the Airbyte
connection id. With `released` (a file), the services hold each job RUNNING until its logical
job is listed there, and a task lists its own only when the try that waits for it begins to
wait (polling, or deferring): so every faulted try sees its job running and every retry takes
its decision on a running job, however long the tries take. Each try appends the decision it
took to `<out>/<task_id>.decisions` (`<try> <action>[ recovered]`); each finished try writes a
report to `<out>/<task_id>.json`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

from taskstate.providers.airbyte import AirbyteTriggerSyncOperator
from taskstate.providers.amazon import AthenaOperator, BatchOperator, EcsRunTaskOperator
from taskstate.providers.dbt_cloud import DbtCloudRunJobOperator

# The hook waits random.uniform(1, 10) s between Batch status checks; its docs show lowering the
# bounds like this. Shorter waits keep the test short and change nothing else.
BatchClientHook.DEFAULT_DELAY_MIN = 0
BatchClientHook.DEFAULT_DELAY_MAX = 1

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG

KILLS = ("in_window", "after_persist", "while_polling")
POINTS = (*KILLS, "before_defer", "foreign_id")
OPERATORS = ("athena", "batch", "ecs", "dbt_cloud", "airbyte")
# Each operator at one kill point, the three points among them: Athena while polling, Batch
# after the id is saved, ECS, dbt Cloud and Airbyte inside the window (their `find_job`).
EACH_POINT = [
    f"{op}_{point}"
    for op, point in zip(
        OPERATORS, ("while_polling", "after_persist", *["in_window"] * 3), strict=True
    )
]
# The three provider packages once each, at a kill point each, with the code their 2.10
# releases differ in most: Airbyte's `find_job` (the airbyte_api client), ECS's waiter, dbt
# Cloud's run status.
SEQUENTIAL = ["airbyte_in_window", "ecs_while_polling", "dbt_cloud_after_persist"]
# A retry after `while_polling` takes the same path as after `after_persist` (reconnect to the
# saved id): every operator at `after_persist`, and Batch at both.
DAGS_TEST = [
    f"{op}_{point}"
    for op in OPERATORS
    for point in ("in_window", "after_persist", "before_defer", "foreign_id")
] + ["batch_while_polling"]
FOREIGN_TOKEN = "ts-" + "f" * 40


def _services(context: Any) -> dict[str, str]:
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    services = conf.get("services") or json.loads(os.environ.get("TS_SERVICES", "{}"))
    aws = {"endpoint_url": services["aws"], "region_name": "us-east-1"}
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(
        {"conn_type": "aws", "login": "testing", "password": "testing", "extra": aws}
    )
    # Passwords are masked in task logs: one of a letter or two would garble every line.
    token = "fake-dbt-cloud-api-token"
    dbt = {"conn_type": "dbt_cloud", "host": services["dbt"], "login": "7", "password": token}
    os.environ["AIRFLOW_CONN_DBT_CLOUD_DEFAULT"] = json.dumps(dbt)
    airbyte = {
        "conn_type": "airbyte",
        "host": services["airbyte"],
        "login": "fake-airbyte-client-id",
        "password": "fake-airbyte-client-secret",
    }
    os.environ["AIRFLOW_CONN_AIRBYTE_DEFAULT"] = json.dumps(airbyte)
    os.environ["REQUESTS_CA_BUNDLE"] = services["ca"]
    os.environ["SSL_CERT_FILE"] = services["ca"]  # aiohttp (dbt Cloud's trigger) reads this one
    return services


def _release(context: Any) -> None:
    """Let this task's job end (the services hold it RUNNING until then, when told to)."""
    services = _services(context)
    if services.get("released"):
        ti = context["ti"]
        with open(services["released"], "a") as f:
            f.write(f"{ti.run_id}|{ti.task_id}\n")


def _fault(context: Any) -> None:
    how = os.environ.get("TS_PROVIDER_FAULT", "kill")
    if int(context["ti"].try_number) != 1 or how == "none":
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("try 1 fails here on purpose (TS_PROVIDER_FAULT=raise)")


class _LosesTheId:
    """A task_state_store whose first write of a job id fails (the `in_window` point when the
    fault is an exception: `dags test` runs every task in its own process)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, key: str, default: Any = None) -> Any:
        return self._store.get(key, default)

    def set(self, key: str, value: Any, **kwargs: Any) -> None:
        if isinstance(value, dict) and "external_id" in value:
            raise RuntimeError("try 1 dies between the submission and saving its id (raise)")
        self._store.set(key, value, **kwargs)


class _Faulted:
    """Faults try 1 at `fault_at`, names the logical job, and reports each finished try."""

    fault_at: str

    def name_logical_job(self, logical: str) -> None:
        raise NotImplementedError

    def submit_job(self, context: Any) -> Any:
        external_id = super().submit_job(context)  # type: ignore[misc]
        if self.fault_at == "in_window" and os.environ.get("TS_PROVIDER_FAULT") != "raise":
            _fault(context)
        return external_id

    def resume_decision(self, context: Any) -> Any:
        decision = super().resume_decision(context)  # type: ignore[misc]
        ti = context["ti"]
        recovered = " recovered" if decision.recovered else ""
        line = f"{int(ti.try_number)} {decision.action.value}{recovered}\n"
        with (Path(_services(context)["out"]) / f"{ti.task_id}.decisions").open("a") as f:
            f.write(line)
        return decision

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        if self.fault_at == "after_persist":
            _fault(context)
        elif self.fault_at == "while_polling" and int(context["ti"].try_number) == 1:
            self.get_job_status(external_id, context)  # type: ignore[attr-defined]
            _fault(context)
        _release(context)
        super().poll_until_complete(external_id, context)  # type: ignore[misc]

    def defer_job(self, external_id: Any, context: Any) -> Any:
        if self.fault_at == "before_defer":
            _fault(context)
        _release(context)
        return super().defer_job(external_id, context)  # type: ignore[misc]

    def execute_complete(self, context: Any, event: Any = None, **kwargs: Any) -> Any:
        services = _services(context)
        self.name_logical_job(f"{context['ti'].run_id}|{context['ti'].task_id}")
        result = super().execute_complete(context, event, **kwargs)  # type: ignore[misc]
        store = context.get("task_state_store")
        key = self.external_id_key  # type: ignore[attr-defined]
        stored = None if store is None else store.get(key)
        _report(services, context["ti"], stored, result, via="execute_complete")
        return result

    def execute(self, context: Any, **kwargs: Any) -> Any:  # Airflow 2's sentinel
        services = _services(context)
        ti = context["ti"]
        self.name_logical_job(f"{ti.run_id}|{ti.task_id}")
        raising = os.environ.get("TS_PROVIDER_FAULT") == "raise" and int(ti.try_number) == 1
        store = context.get("task_state_store")
        key = self.external_id_key  # type: ignore[attr-defined]
        if self.fault_at == "foreign_id" and store is not None:
            foreign = services["foreign"][self.task_id.rsplit("_foreign_id", 1)[0]]  # type: ignore[attr-defined]
            store.set(
                key + "__intent", {"token": FOREIGN_TOKEN, "attempt": 1, "external_id": foreign}
            )
            store.set(key, foreign)
        if self.fault_at == "in_window" and raising and context.get("task_state_store"):
            # An exception out of submit_job would be a refused submission (the retry may
            # submit again): fail the write of the id instead, as a crash right there would.
            context["task_state_store"] = _LosesTheId(context["task_state_store"])
        result = super().execute(context, **kwargs)  # type: ignore[misc]
        store = context.get("task_state_store")
        _report(services, ti, None if store is None else store.get(key), result)
        return result


def _report(
    services: dict[str, str], ti: Any, stored: Any, result: Any, via: str = "execute"
) -> None:
    report = {
        "via": via,  # the method that returned the result
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "try_number": int(ti.try_number),
        "stored": stored,
        "result": result,
    }
    (Path(services["out"]) / f"{ti.task_id}.json").write_text(json.dumps(report))


class FaultedAthena(_Faulted, AthenaOperator):
    def name_logical_job(self, logical: str) -> None:
        self.query = f"SELECT '{logical}'"


class FaultedBatch(_Faulted, BatchOperator):
    def name_logical_job(self, logical: str) -> None:
        self.parameters = {"logical": logical}


class FaultedEcs(_Faulted, EcsRunTaskOperator):
    def name_logical_job(self, logical: str) -> None:
        env = [{"name": "LOGICAL", "value": logical}]
        self.overrides = {"containerOverrides": [{"name": "app", "environment": env}]}


class FaultedDbtCloud(_Faulted, DbtCloudRunJobOperator):
    def name_logical_job(self, logical: str) -> None:
        self.trigger_reason = logical


class FaultedAirbyte(_Faulted, AirbyteTriggerSyncOperator):
    def name_logical_job(self, logical: str) -> None:
        self.connection_id = logical


class _UpstreamFaulted:
    """The baseline (bench/provider_durable.py --ours): the provider's own operator, faulted at
    the same points. With nothing saved in between, `in_window` and `after_persist` are both
    "right after the submission call returned"; `while_polling` is the second status call."""

    fault_at: str
    # (class, method) of the submission call and of the status call the wait repeats
    calls: tuple[Any, str, Any, str]

    def execute(self, context: Any, **kwargs: Any) -> Any:  # Airflow 2's sentinel
        services = _services(context)
        ti = context["ti"]
        self.name_logical_job(f"{ti.run_id}|{ti.task_id}")  # type: ignore[attr-defined]
        submit_owner, submit, status_owner, status = self.calls
        submitted = getattr(submit_owner, submit)
        checked = getattr(status_owner, status)
        calls = []

        def after_submit(*args: Any, **kwargs: Any) -> Any:
            answer = submitted(*args, **kwargs)
            if self.fault_at != "while_polling":
                _fault(context)
            return answer

        def status_check(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            waits_in_one_call = status in ("_wait_for_task_ended", "poll_query_status")
            if self.fault_at == "while_polling" and len(calls) == (1 if waits_in_one_call else 2):
                time.sleep(1)
                _fault(context)
            return checked(*args, **kwargs)

        setattr(submit_owner, submit, after_submit)
        setattr(status_owner, status, status_check)
        try:
            result = super().execute(context, **kwargs)  # type: ignore[misc]
        finally:
            setattr(submit_owner, submit, submitted)
            setattr(status_owner, status, checked)
        _report(services, ti, None, result)
        return result


def _upstream_classes() -> dict[str, type]:
    from airflow.providers.airbyte.hooks.airbyte import AirbyteHook
    from airflow.providers.airbyte.operators.airbyte import AirbyteTriggerSyncOperator as Ab
    from airflow.providers.amazon.aws.hooks.athena import AthenaHook
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
    from airflow.providers.amazon.aws.operators.athena import AthenaOperator as Athena
    from airflow.providers.amazon.aws.operators.batch import BatchOperator as Batch
    from airflow.providers.amazon.aws.operators.ecs import EcsRunTaskOperator as Ecs
    from airflow.providers.dbt.cloud.hooks.dbt import DbtCloudHook
    from airflow.providers.dbt.cloud.operators.dbt import DbtCloudRunJobOperator as Dbt

    def faulted(ours: type, upstream: type, calls: tuple[Any, str, Any, str]) -> type:
        body = {"calls": calls, "name_logical_job": ours.name_logical_job}  # type: ignore[attr-defined]
        return type(f"Upstream{upstream.__name__}", (_UpstreamFaulted, upstream), body)

    return {
        # Athena, like ECS, waits in one call (a boto waiter)
        "athena": faulted(
            FaultedAthena, Athena, (AthenaHook, "run_query", AthenaHook, "poll_query_status")
        ),
        "batch": faulted(
            FaultedBatch, Batch, (Batch, "submit_job", BatchClientHook, "get_job_description")
        ),
        # ECS waits in one call (a boto waiter): the fault comes a second into it
        "ecs": faulted(FaultedEcs, Ecs, (Ecs, "_start_task", Ecs, "_wait_for_task_ended")),
        "dbt_cloud": faulted(
            FaultedDbtCloud,
            Dbt,
            (DbtCloudHook, "trigger_job_run", DbtCloudHook, "get_job_run_status"),
        ),
        "airbyte": faulted(
            FaultedAirbyte,
            Ab,
            (AirbyteHook, "submit_sync_connection", AirbyteHook, "get_job_details"),
        ),
    }


def _task(operator: str, point: str, classes: dict[str, Any]) -> Any:
    task = _operator(classes[operator], operator, point)
    task.fault_at = point
    return task


def _operator(cls: Any, operator: str, point: str) -> Any:
    common: dict[str, Any] = {"task_id": f"{operator}_{point}"}
    if point == "before_defer":  # the provider's trigger, polling every second
        common["deferrable"] = True
        if operator == "batch":
            common["poll_interval"] = 1
    if operator == "athena":
        return cls(
            **common, query="SELECT 1", database="analytics", output_location="s3://results/",
            sleep_time=1,
        )  # fmt: skip
    if operator == "batch":
        return cls(
            **common, job_name=f"ts_{point}", job_queue="ts-queue", job_definition="ts-job",
            max_retries=60,
        )  # fmt: skip
    if operator == "ecs":
        return cls(
            **common, cluster="ts", task_definition="ts-app", launch_type="FARGATE",
            overrides={}, waiter_delay=1, waiter_max_attempts=120,
        )  # fmt: skip
    if operator == "dbt_cloud":
        return cls(**common, job_id=42, account_id=7, check_interval=1, timeout=300)
    return cls(**common, connection_id="unset", wait_seconds=1, timeout=300)


OURS = {
    "athena": FaultedAthena,
    "batch": FaultedBatch,
    "ecs": FaultedEcs,
    "dbt_cloud": FaultedDbtCloud,
    "airbyte": FaultedAirbyte,
}


def _dag(dag_id: str, tasks: list[str], classes: dict[str, Any]) -> None:
    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2024, 1, 1),
        catchup=False,
        default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    ):
        for name in tasks:
            point = next(p for p in POINTS if name.endswith("_" + p))
            _task(name[: -len(point) - 1], point, classes)


_dag("ts_providers_ours_kills", [f"{op}_{p}" for op in OPERATORS for p in KILLS], OURS)
# Under a scheduler (SIGKILL, a task process per try): every kill point, each operator once;
# under a sequential executor (one try at a time, ~7 s each on Airflow 2.10 idle), three tasks.
_dag("ts_providers_ours_each_point", EACH_POINT, OURS)
_dag("ts_providers_ours_sequential", SEQUENTIAL, OURS)
# `dags test` (every try in the command's process, the fault an exception, a try costs little):
# every operator at each point, deferrable mode included (the command runs each trigger inline;
# a held job ends once its task defers on it).
_dag("ts_providers_ours_dags_test", DAGS_TEST, OURS)
if os.environ.get("TS_PROVIDERS_UPSTREAM"):  # the bench's baseline: the providers' own classes
    _dag(
        "ts_providers_upstream",
        [f"{op}_{p}" for op in OPERATORS for p in KILLS],
        _upstream_classes(),
    )
