"""Real distributed engines: the CeleryExecutor with a Redis broker, workers on their own
AIRFLOW_HOME. See tests/airflow/celery_deployment.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples.airflow.demo import DAG_ID, KILL_AT, TASK_ID
from tests.airflow.celery_deployment import CeleryDeployment, celery_deployment
from tests.airflow.harness import versions
from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.errors import StaleTryError
from taskstate.scope import task_prefix
from taskstate.settings import Settings

# Each test's own waits: the api-server 180 s, two runs of 420 s, stopping 60 s (and migrating).
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_task_is_refused_the_default_sqlite_file(tmp_path: Path) -> None:
    with celery_deployment(tmp_path, "3.2") as deployment:
        deployment.airflow.run("dags", "unpause", DAG_ID)
        deployment.airflow.wait_for("failed", 4)
        log = deployment.task_logs(DAG_ID, TASK_ID)
    assert "ConfigError" in log
    assert "CeleryExecutor runs tasks on several machines" in log
    assert "[state_store] taskstate_url" in log
    assert not (tmp_path / "worker" / "etl_ledger.jsonl").exists()  # refused before any work


def _migrate(url: str) -> None:
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()


def _distributed_runs_resume(deployment: CeleryDeployment, store: StateStore) -> None:
    """Try 1 of the ETL task is SIGKILLed on its worker right after record 7's checkpoint and
    try 2 resumes; in a mapped task of 8 indices every odd index is SIGKILLed once and resumes.
    Every record and row is processed exactly once."""
    deployment.airflow.run("dags", "unpause", DAG_ID)
    deployment.airflow.wait_for("success", 2)
    assert deployment.ledger("etl_ledger.jsonl") == {record: 1 for record in range(1, 21)}
    assert "try 2: resuming after record 7" in deployment.task_logs(DAG_ID, TASK_ID)

    assert deployment.trigger_and_wait("ts_mapped8") == "success"
    assert deployment.ledger("mapped_ledger.jsonl") == {
        (i, row): 1 for i in range(8) for row in range(5)
    }
    states = {
        scope.map_index: dict(store.task_state(scope).items())
        for scope, _ in store.scopes(task_prefix("ts_mapped8"))
        if isinstance(scope, TaskScope)
    }
    assert states == {i: {"cursor": 5, "index": i} for i in range(8)}


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_3_worker_without_metadata_db_resumes_from_postgres_state(
    tmp_path: Path, postgres_url: str
) -> None:
    """Airflow 3.2: the worker has no sql_alchemy_conn, only taskstate's own PostgreSQL."""
    _migrate(postgres_url)
    with (
        celery_deployment(
            tmp_path,
            "3.2",
            extra={"TASKSTATE_DEMO_KILL_AT": str(KILL_AT)},
            worker_env={"AIRFLOW__STATE_STORE__TASKSTATE_URL": postgres_url},
        ) as deployment,
        StateStore(postgres_url, settings=Settings()) as store,
    ):
        _distributed_runs_resume(deployment, store)


@pytest.mark.skipif("2.11" not in versions(), reason="Airflow 2.11 not selected")
def test_celery_2_worker_resumes_from_the_postgres_metadata_db(tmp_path: Path) -> None:
    """Airflow 2.11: workers reach the PostgreSQL metadata DB, which taskstate then uses."""
    with running_server() as server:
        conn = server.url.replace("postgresql://", "postgresql+psycopg2://", 1)
        _migrate(server.url)
        with (
            celery_deployment(
                tmp_path,
                "2.11",
                extra={
                    "TASKSTATE_DEMO_KILL_AT": str(KILL_AT),
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
                },
            ) as deployment,
            StateStore(server.url, settings=Settings()) as store,
        ):
            _distributed_runs_resume(deployment, store)


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_3_worker_without_any_database_resumes_over_http(tmp_path: Path) -> None:
    """Airflow 3.2: the worker has no sql_alchemy_conn and no taskstate database: its tasks
    reach their state through the plugin's routes on the api-server, with a token each task
    mints for its own try. Then a write from a try that is no longer running is refused."""
    secret = "celery-http-test-secret-" + "k" * 24
    keys = SigningKeys([secret])
    with celery_deployment(
        tmp_path,
        "3.2",
        extra={
            "TASKSTATE_DEMO_KILL_AT": str(KILL_AT),
            "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": secret,
        },
        worker_env={"AIRFLOW__STATE_STORE__TASKSTATE_URL": "{api_url}"},
    ) as deployment:
        admin = keys.issue(Claims(subject="test", admin=True))
        url = deployment.api_url
        with StateStore(url, settings=Settings(), backend=HttpBackend(url, token=admin)) as store:
            _distributed_runs_resume(deployment, store)
        # Try 1 of the ETL task is long gone: a write with a token for it is fenced off.
        (run,) = deployment.runs(DAG_ID)
        scope = TaskScope(DAG_ID, run["run_id"], TASK_ID)
        stale = keys.issue(
            Claims(subject="zombie", dag_ids=(DAG_ID,), run_id=scope.run_id, task_id=TASK_ID,
                   map_index=-1, try_number=1)
        )  # fmt: skip
        zombie = StateStore(url, settings=Settings(), backend=HttpBackend(url, token=stale))
        with pytest.raises(StaleTryError, match="stale try"):
            zombie.task_state(scope).set("last_cursor", 0)
        assert zombie.task_state(scope).get("last_cursor") == 20
