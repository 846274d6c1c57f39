"""A real scheduler + LocalExecutor, on one Airflow 3 (SQLite metadata DB; the task runs under
the Task SDK supervisor in its own process) and one Airflow 2 (PostgreSQL metadata DB, since its
LocalExecutor refuses SQLite): the task process is SIGKILLed on try 1 and the retry resumes
from its checkpoint, every record exactly once; then a clear starts the state over."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from examples.airflow.demo import DAG_ID, KILL_AT, Airflow
from tests.airflow.harness import NO_REPARSE, copy_migrated_db, versions
from tests.postgres_server import running_server

# Its own waits: the api-server 180 s, two runs of 420 s, stopping 30 s (plus migrating).
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]


def sigkill_resume_then_clear(home: Path, version: str, extra: Mapping[str, str] = {}) -> None:
    extra = {"TASKSTATE_DEMO_KILL_AT": str(KILL_AT), **NO_REPARSE, **extra}
    airflow = Airflow(home, version, extra=extra, migrated=copy_migrated_db)
    with airflow.services():
        airflow.run("dags", "unpause", DAG_ID)
        airflow.wait_for("success", 2)
        assert airflow.ledger() == {record: 1 for record in range(1, 21)}
        killed = [p for p in home.glob("logs/**/*attempt=1*") if "SIGKILL" in p.read_text()]
        assert killed, "try 1 was not killed"

        airflow.run("tasks", "clear", DAG_ID, "--yes")
        airflow.wait_for("success", 3)
    # The re-run started from record 1, not from the checkpoint at 20.
    assert airflow.ledger() == {record: 2 for record in range(1, 21)}


@pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected")
def test_airflow3_sigkilled_task_resumes_and_a_clear_starts_over(tmp_path: Path) -> None:
    sigkill_resume_then_clear(tmp_path, "3.2")


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
