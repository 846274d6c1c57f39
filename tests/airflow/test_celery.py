"""Real distributed engines: the CeleryExecutor with a Redis broker, workers on their own
AIRFLOW_HOME. See tests/airflow/celery_deployment.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples.airflow.demo import DAG_ID, TASK_ID
from tests.airflow.celery_deployment import celery_deployment
from tests.airflow.harness import versions

pytestmark = pytest.mark.airflow


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
