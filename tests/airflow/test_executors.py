"""`taskstate doctor` per executor, and local test runs under a distributed executor's config,
on real Airflow (the refusal inside a real Celery worker is in test_celery.py)."""

from __future__ import annotations

import json

import pytest
from tests.airflow.harness import AirflowHome

from taskstate import TaskScope

pytestmark = pytest.mark.airflow

ECS = "airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor"
BATCH = "airflow.providers.amazon.aws.executors.batch.batch_executor.AwsBatchExecutor"


def test_doctor_reports_each_executor_and_exits_1_on_a_failed_check(
    airflow_home: AirflowHome,
) -> None:
    # docs/airflow.md: fails for Celery and the other distributed executors, warns for one it
    # cannot classify.
    env = {
        "AIRFLOW__CORE__EXECUTOR": f"LocalExecutor,CeleryExecutor,ecs:{ECS},{BATCH},my.own.Executor"
    }
    proc = airflow_home.python("-m", "taskstate", "doctor", "--json", env=env)
    checks = {c["check"]: c["status"] for c in json.loads(proc.stdout)}
    executors = {name: status for name, status in checks.items() if name.startswith("executor")}
    assert executors == {
        "executor LocalExecutor": "ok",
        "executor CeleryExecutor": "fail",
        "executor ecs": "fail",
        "executor AwsBatchExecutor": "fail",
        "executor Executor": "warn",
    }
    assert proc.returncode == 1
    # A chosen backend: no failure, exit 0 (a shared SQLite volume is a warning).
    shared = {**env, "AIRFLOW__STATE_STORE__TASKSTATE_URL": f"sqlite:///{airflow_home.home}/s.db"}
    proc = airflow_home.python("-m", "taskstate", "doctor", "--json", env=shared)
    statuses = {c["check"]: c["status"] for c in json.loads(proc.stdout)}
    assert statuses["executor ecs"] == "warn" and proc.returncode == 0, proc.stdout


def test_dags_test_is_not_refused_under_a_distributed_executor(
    airflow_home: AirflowHome, dag_runs: dict[str, str]
) -> None:
    dag_id = "etl_with_checkpoint"  # run under [core] executor = CeleryExecutor (DAG_RUNS)
    run_id = airflow_home.finished_run_id(dag_id, dag_runs["etl_under_celery"])
    with airflow_home.store() as store:
        state = store.task_state(TaskScope(dag_id, run_id, "process_records"))
        assert state.get("last_cursor") == 20
