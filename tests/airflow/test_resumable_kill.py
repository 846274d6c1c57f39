"""Real Airflow, real scheduler: try 1 of a ResumableJobMixin task SIGKILLs its own task process
(after the job system accepted the job, or while polling it); Airflow retries; the retry must
reconnect to that job — one job per task — and return its result.

One Airflow 2 (scheduler + SequentialExecutor) and one Airflow 3 (api-server, dag-processor,
scheduler + LocalExecutor), each on a throwaway AIRFLOW_HOME with SQLite; the deployment code is
bench/versus's (`versus.scheduler.Deployment`), the job system is tests/resumable's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.airflow.harness import copy_migrated_db

# Its own waits: the api-server 180 s, the run 900 s, stopping 30 s.
pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
DAG = Path(__file__).with_name("resumable_dags") / "ts_resumable_kill.py"
JOBSYSTEM = REPO / "tests" / "resumable" / "jobsystem.py"
# Real Airflow runs only when scripts/test-airflow.sh (or a person) picks versions.
SELECTED = os.environ.get("TASKSTATE_AIRFLOW_VERSIONS", "").split()


def _jobsystem() -> Any:
    spec = importlib.util.spec_from_file_location("kill_jobsystem", JOBSYSTEM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["2.10", "3.3"])  # one Airflow 2, one Airflow 3
def test_try_1_killed_the_retry_reconnects_to_the_one_job(version: str, tmp_path: Path) -> None:
    if version not in SELECTED:
        pytest.skip(f"Airflow {version} not selected (TASKSTATE_AIRFLOW_VERSIONS)")
    if not (REPO / "scripts" / "airflow-env.sh").exists():
        pytest.skip("scripts/airflow-env.sh (the pinned Airflow envs) is not on this branch")
    sys.path.insert(0, str(REPO / "bench"))
    from versus.envs import AirflowHome, Side
    from versus.scheduler import Deployment

    side = Side(f"mixin kill test {version}", version, taskstate=True)
    side.prepare()
    home = AirflowHome(side, tmp_path / "home", migrated=copy_migrated_db)
    (home.root / "dags" / "versus_dags.py").unlink()
    shutil.copy(DAG, home.root / "dags")
    out = tmp_path / "out"
    out.mkdir()
    jobsystem = _jobsystem()
    extra = {"RESUMABLE_JOBSYSTEM": str(JOBSYSTEM), "RESUMABLE_JOBS_DB": str(tmp_path / "jobs.db")}
    with jobsystem.running_jobsystem(tmp_path / "jobs.db") as jobs:
        deployment = Deployment(home, out, extra)
        if side.airflow_major == 2:  # Airflow 2 runs LocalExecutor on PostgreSQL/MySQL only
            deployment.env["AIRFLOW__CORE__EXECUTOR"] = "SequentialExecutor"
        with deployment as live:
            reports = {r["task_id"]: r for r in live.run("ts_resumable_kill", tasks=3)}
        created = {task: jobs.jobs_for(r["logical"]) for task, r in reports.items()}
        submits = {task: len(jobs.submissions_for(r["logical"])) for task, r in reports.items()}
    for task, report in reports.items():
        assert report["try_number"] == 2, report  # try 1 died
        assert len(created[task]) == 1, (task, created[task])
        assert report["result"] == {
            "job_id": created[task][0][0],
            "output": jobsystem.expected_output(report["logical"]),
        }
    assert reports["client_token"]["decision"] == "recover_from_intent"
    assert submits["client_token"] == 2  # the resubmission carried the token and was deduped
    assert reports["find_job"]["recovered"] is True
    assert submits["find_job"] == 1
    assert reports["during_poll"]["decision"] in {"reconnect", "already_succeeded"}
    assert submits["during_poll"] == 1
