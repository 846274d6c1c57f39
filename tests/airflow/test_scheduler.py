"""A real scheduler + LocalExecutor: the task process is SIGKILLed on try 1 and the retry
resumes from its checkpoint (every record exactly once); a clear then starts the state over."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples.airflow.demo import DAG_ID, KILL_AT, Airflow
from tests.airflow.harness import versions

pytestmark = pytest.mark.airflow

AIRFLOW_3 = "3.2"


@pytest.mark.skipif(AIRFLOW_3 not in versions(), reason=f"Airflow {AIRFLOW_3} not selected")
def test_sigkilled_task_resumes_and_a_clear_starts_over(tmp_path: Path) -> None:
    airflow = Airflow(tmp_path, AIRFLOW_3, extra={"TASKSTATE_DEMO_KILL_AT": str(KILL_AT)})
    with airflow.services():
        airflow.run("dags", "unpause", DAG_ID)
        airflow.wait_for("success", 2)
        assert airflow.ledger() == {record: 1 for record in range(1, 21)}
        killed = [p for p in tmp_path.glob("logs/**/*attempt=1*") if "SIGKILL" in p.read_text()]
        assert killed, "try 1 was not killed"

        airflow.run("tasks", "clear", DAG_ID, "--yes")
        airflow.wait_for("success", 3)
    # The re-run started from record 1, not from the checkpoint at 20.
    assert airflow.ledger() == {record: 2 for record in range(1, 21)}
