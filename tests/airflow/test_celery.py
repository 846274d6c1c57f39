"""Real distributed engines: the CeleryExecutor with a Redis broker, workers on their own
AIRFLOW_HOME. See tests/airflow/celery_deployment.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from examples.airflow.demo import DAG_ID, KILL_AT, TASK_ID
from tests.airflow.celery_deployment import CeleryDeployment, Worker, celery_airflow
from tests.airflow.harness import versions
from tests.fleet import HAProxy
from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.errors import StaleTryError
from taskstate.scope import task_prefix
from taskstate.settings import Settings

# Each test's own waits: migrating (600 s on 2.11's PostgreSQL; a copy elsewhere), the
# api-server 180 s, two runs of 420 s, stopping 60 s.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]

SECRET = "celery-http-test-secret-" + "k" * 24


@pytest.fixture(scope="module")
def celery_32(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryDeployment]:
    """One Airflow 3.2 Celery deployment for this module's 3.2 tests, each with its own worker:
    the ETL task is SIGKILLed after record KILL_AT on try 1; taskstate tokens are signed with
    SECRET (the HTTP worker's)."""
    extra = {
        "TASKSTATE_DEMO_KILL_AT": str(KILL_AT),
        "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET,
    }
    with celery_airflow(tmp_path_factory.mktemp("celery-3.2"), "3.2", extra=extra) as deployment:
        yield deployment


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_task_is_refused_the_default_sqlite_file(celery_32: CeleryDeployment) -> None:
    with celery_32.worker("worker-default") as worker:  # no taskstate_url
        _, state = celery_32.trigger_and_wait(DAG_ID)
    assert state == "failed"  # every try refused
    log = worker.task_logs(DAG_ID, TASK_ID)
    assert "ConfigError" in log
    assert "CeleryExecutor runs tasks on several machines" in log
    assert "[state_store] taskstate_url" in log
    assert not (worker.home / "etl_ledger.jsonl").exists()  # refused before any work


def _migrate(url: str) -> None:
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()


def _distributed_runs_resume(
    deployment: CeleryDeployment, worker: Worker, store: StateStore
) -> str:
    """Try 1 of the ETL task is SIGKILLed on its worker right after record 7's checkpoint and
    try 2 resumes; in a mapped task of 8 indices every odd index is SIGKILLed once and resumes.
    Every record and row is processed exactly once. Returns the ETL run's id.

    Both runs are triggered together: the worker and scheduler serve them at once, not one
    after the other (their ledgers and states are apart)."""
    run_id = deployment.trigger(DAG_ID)
    mapped_run = deployment.trigger("ts_mapped8")
    assert deployment.wait_for_run(DAG_ID, run_id) == "success"
    assert deployment.wait_for_run("ts_mapped8", mapped_run) == "success"
    assert worker.ledger("etl_ledger.jsonl") == {record: 1 for record in range(1, 21)}
    assert "try 2: resuming after record 7" in worker.task_logs(DAG_ID, TASK_ID)
    assert worker.ledger("mapped_ledger.jsonl") == {
        (i, row): 1 for i in range(8) for row in range(5)
    }
    states = {
        scope.map_index: dict(store.task_state(scope).items())
        for scope, _ in store.scopes(task_prefix("ts_mapped8"))
        if isinstance(scope, TaskScope) and scope.run_id == mapped_run
    }
    assert states == {i: {"cursor": 5, "index": i} for i in range(8)}
    return run_id


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_3_worker_without_metadata_db_resumes_from_postgres_state(
    celery_32: CeleryDeployment, postgres_url: str
) -> None:
    """Airflow 3.2: the worker has no sql_alchemy_conn, only taskstate's own PostgreSQL."""
    _migrate(postgres_url)
    env = {"AIRFLOW__STATE_STORE__TASKSTATE_URL": postgres_url}
    with (
        celery_32.worker("worker-postgres", env) as worker,
        StateStore(postgres_url, settings=Settings()) as store,
    ):
        _distributed_runs_resume(celery_32, worker, store)


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_celery_3_worker_without_any_database_resumes_over_http(
    celery_32: CeleryDeployment,
) -> None:
    """Airflow 3.2: the worker has no sql_alchemy_conn and no taskstate database: its tasks
    reach their state through the plugin's routes on the api-server, behind a load balancer
    (the fleet's HAProxy, as docs/deployment.md configures it), with a token each task mints
    for its own try. Then a write from a try that is no longer running is refused."""
    keys = SigningKeys([SECRET])
    api_port = urlsplit(celery_32.api_url).port
    assert api_port is not None
    balancer = HAProxy([_ApiServer("api-server", api_port)], celery_32.root)
    balancer.start()
    try:
        url = balancer.url
        env = {"AIRFLOW__STATE_STORE__TASKSTATE_URL": url}
        with celery_32.worker("worker-http", env) as worker:
            admin = keys.issue(Claims(subject="test", admin=True))
            backend = HttpBackend(url, token=admin)
            with StateStore(url, settings=Settings(), backend=backend) as store:
                run_id = _distributed_runs_resume(celery_32, worker, store)
            # Try 1 of the ETL task is long gone: a write with a token for it is fenced off.
            scope = TaskScope(DAG_ID, run_id, TASK_ID)
            stale = keys.issue(
                Claims(subject="zombie", dag_ids=(DAG_ID,), run_id=scope.run_id,
                       task_id=TASK_ID, map_index=-1, try_number=1)
            )  # fmt: skip
            zombie = StateStore(url, settings=Settings(), backend=HttpBackend(url, token=stale))
            with pytest.raises(StaleTryError, match="stale try"):
                zombie.task_state(scope).set("last_cursor", 0)
            assert zombie.task_state(scope).get("last_cursor") == 20
    finally:
        balancer.kill()


@dataclass
class _ApiServer:
    """Airflow's api-server as the balancer's one upstream."""

    name: str
    port: int


# Last: the 3.2 deployment (a module fixture) runs until the module's end, so a test on another
# deployment after the 3.2 tests does not share the machine with it.
@pytest.mark.skipif("2.11" not in versions(), reason="Airflow 2.11 not selected")
def test_celery_2_worker_resumes_from_the_postgres_metadata_db(tmp_path: Path) -> None:
    """Airflow 2.11: workers reach the PostgreSQL metadata DB, which taskstate then uses."""
    with running_server() as server:
        conn = server.url.replace("postgresql://", "postgresql+psycopg2://", 1)
        _migrate(server.url)
        extra = {
            "TASKSTATE_DEMO_KILL_AT": str(KILL_AT),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
        }
        with (
            celery_airflow(tmp_path, "2.11", extra=extra) as deployment,
            deployment.worker("worker") as worker,
            StateStore(server.url, settings=Settings()) as store,
        ):
            _distributed_runs_resume(deployment, worker, store)
