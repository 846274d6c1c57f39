"""A real scheduler + LocalExecutor, on one Airflow 3 (SQLite metadata DB; the task runs under
the Task SDK supervisor in its own process) and one Airflow 2 (PostgreSQL metadata DB, since its
LocalExecutor refuses SQLite): the task process is SIGKILLed on try 1 and the retry resumes
from its checkpoint, every record exactly once; then a clear starts the state over. Airflow 3's
runs on the shared 3.2 deployment (tests/airflow/deployment.py), not on one of its own."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from examples.airflow.demo import DAG_ID, KILL_AT, TASK_ID, Airflow, ledger
from tests.airflow.deployment import Deployments
from tests.airflow.harness import NO_REPARSE, copy_migrated_db, not_selected, versions
from tests.postgres_server import running_server

# Its own waits: the api-server 180 s (240 s for the shared deployment), two runs of 420 s,
# stopping 30 s (plus migrating).
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]
EXACTLY_ONCE = {record: 1 for record in range(1, 21)}
TWICE = {record: 2 for record in range(1, 21)}  # the re-run started from record 1, not 20


def killed_on_try_1(home: Path) -> bool:
    return any("SIGKILL" in p.read_text() for p in home.glob("logs/**/*attempt=1*"))


def sigkill_resume_then_clear(home: Path, version: str, extra: Mapping[str, str] = {}) -> None:
    extra = {"TASKSTATE_DEMO_KILL_AT": str(KILL_AT), **NO_REPARSE, **extra}
    airflow = Airflow(home, version, extra=extra, migrated=copy_migrated_db)
    with airflow.services():
        airflow.run("dags", "unpause", DAG_ID)
        airflow.wait_for("success", 2)
        assert airflow.ledger() == EXACTLY_ONCE
        assert killed_on_try_1(home), "try 1 was not killed"

        airflow.run("tasks", "clear", DAG_ID, "--yes")
        airflow.wait_for("success", 3)
    assert airflow.ledger() == TWICE


@pytest.mark.parametrize("version", ["3.2"])
def test_airflow3_sigkilled_task_resumes_and_a_clear_starts_over(
    version: str, deployments: Deployments
) -> None:
    if version not in versions():
        pytest.skip(not_selected([version]))
    deployment = deployments.get(version)
    home = deployment.home.home

    def query(sql: str, *params: str) -> list[tuple[object, ...]]:
        with sqlite3.connect(home / "airflow.db", timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def tries() -> list[tuple[object, ...]]:
        sql = "SELECT state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?"
        return query(sql, DAG_ID, run_id)

    # Unpaused, the DAG gets its one scheduled run (catchup is off), as the demo's does.
    with deployment.client("admin") as http:
        unpaused = http.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})
    assert unpaused.status_code == 200, unpaused.text
    deadline = time.monotonic() + 240
    while not (runs := query("SELECT run_id FROM dag_run WHERE dag_id = ?", DAG_ID)):
        assert time.monotonic() < deadline, f"no run of {DAG_ID}\n{deployment.log_tail()}"
        time.sleep(2)
    ((run_id,),) = runs
    assert isinstance(run_id, str)
    deployment.wait_for_run(DAG_ID, run_id, timeout=420)
    assert tries() == [("success", 2)]
    assert ledger(home) == EXACTLY_ONCE
    assert killed_on_try_1(home), "try 1 was not killed"

    with deployment.client("admin") as http:  # as `airflow tasks clear` does, in no process
        cleared = http.post(
            f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
            json={"dry_run": False, "only_failed": False, "dag_run_id": run_id,
                  "task_ids": [TASK_ID]},
        )  # fmt: skip
    assert cleared.status_code == 200, cleared.text
    deployment.wait_for_run(DAG_ID, run_id, timeout=420)
    assert tries() == [("success", 3)]
    assert ledger(home) == TWICE


@pytest.mark.skipif("2.10" not in versions(), reason="Airflow 2.10 not selected")
def test_airflow2_sigkilled_task_resumes_and_a_clear_starts_over(tmp_path: Path) -> None:
    with running_server() as server:
        conn = server.url.replace("postgresql://", "postgresql+psycopg2://", 1)
        sigkill_resume_then_clear(
            tmp_path,
            "2.10",
            {
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
                # State stays in the embedded file (else it would follow Airflow to PostgreSQL).
                "AIRFLOW__STATE_STORE__TASKSTATE_URL": f"sqlite:///{tmp_path}/taskstate.db",
            },
        )
