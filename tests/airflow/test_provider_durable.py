"""`[state_store] taskstate_provider_durable`: upstream provider operators' `durable=True` on
Airflow 3.0–3.2, with Amazon's `RedshiftDataOperator` and `GlueJobOperator` from PyPI against
moto's server on loopback (tests/aws_server.py).

Under a real scheduler on Airflow 3.2 (api-server, dag-processor, scheduler + LocalExecutor),
try 1 of each task is SIGKILLed after the job id is persisted or while polling: with the
setting on the retry reconnects and the service saw one job per task (that test runs on
tests/airflow/test_resumable_kill.py's 3.2 deployment: one deployment for both files' kills).
Under `dags test` on 3.0 and 3.1 the same operators resume from a failed try 1, and `tasks test`
takes their durable path with the setting on and the providers' own (stand-in mixin, not
durable) with it off.
Upstream's behaviour under a scheduler (every try submits anew) is a baseline: it lives in
bench/provider_durable.py, not in the suite.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.airflow.harness import AirflowHome
from tests.aws_server import running_aws

pytestmark = pytest.mark.airflow

DAG_FILE = Path(__file__).with_name("provider_dags") / "ts_provider_durable.py"
DAG_ID = "ts_provider_durable"
TASKS = [f"{op}_{at}" for op in ("redshift", "glue") for at in ("after_persist", "while_polling")]
SELECTED = os.environ.get("TASKSTATE_AIRFLOW_VERSIONS", "").split()
TASKSTATE_MIXIN = "taskstate.resumable.mixin"
PROVIDER_STANDIN = "airflow.providers.common.compat._resumable_job_mixin"
SETTING = "AIRFLOW__STATE_STORE__TASKSTATE_PROVIDER_DURABLE"


def by_task(submissions: list[dict[str, Any]]) -> Counter[str]:
    """Jobs the service accepted, per task (the DAG names its logical job in each)."""
    return Counter(s["logical"].split("|")[1] for s in submissions)


@pytest.fixture(scope="module", params=[v for v in ("3.0", "3.1") if v in SELECTED] or ["none"])
def provider_home(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AirflowHome:
    if request.param == "none":
        pytest.skip("neither Airflow 3.0 nor 3.1 selected")
    root = tmp_path_factory.mktemp(f"providers-{request.param}")
    return AirflowHome(request.param, root, [DAG_FILE])


def test_dags_test_provider_operators_resume_a_failed_try(
    provider_home: AirflowHome, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with running_aws(tmp_path) as aws:
        provider_home.dags_test(
            DAG_ID,
            env={
                "AIRFLOW_CONN_AWS_DEFAULT": aws.airflow_connection(),
                "TS_PROVIDER_FAULT": "raise",
                "VERSUS_OUT": str(out),
                SETTING: "True",
            },
        )
        jobs = by_task(aws.submissions())
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(reports) == sorted(TASKS)
    for task in TASKS:
        assert reports[task]["try_number"] == 2, reports[task]
        assert reports[task]["mixin"] == TASKSTATE_MIXIN
        assert jobs[task] == 1, (task, jobs)


@pytest.mark.parametrize("setting", [True, False])
def test_tasks_test_provider_operator_takes_the_durable_path(
    provider_home: AirflowHome, tmp_path: Path, setting: bool
) -> None:
    """`airflow tasks test` (no fault): with the setting the operator runs on taskstate's mixin
    and saves its id; without it, on the providers' own stand-in, not durable, saving nothing."""
    out = tmp_path / "out"
    out.mkdir()
    with running_aws(tmp_path) as aws:
        provider_home.airflow(
            "tasks", "test", DAG_ID, "redshift_after_persist", "2025-01-01",
            env={
                "AIRFLOW_CONN_AWS_DEFAULT": aws.airflow_connection(),
                "TS_PROVIDER_FAULT": "none",
                "VERSUS_OUT": str(out),
                SETTING: str(setting),
            },
        )  # fmt: skip
        jobs = by_task(aws.submissions())
    report = json.loads((out / "redshift_after_persist.json").read_text())
    assert jobs == {"redshift_after_persist": 1}
    if setting:
        assert (report["mixin"], report["durable"]) == (TASKSTATE_MIXIN, True), report
        assert report["result"] == [report["stored"]]
    else:
        assert (report["mixin"], report["durable"]) == (PROVIDER_STANDIN, False), report
        assert report["stored"] is None and report["result"], report


def test_doctor_reports_the_setting_and_whether_it_is_active(airflow_home: AirflowHome) -> None:
    """Active (checked in a fresh Airflow process) on 3.0–3.2; on 2.x inactive, and no
    `airflow.sdk` is faked there."""
    status, detail = airflow_home.doctor()["provider durable"]
    assert (status, detail.startswith("off")) == ("ok", True), detail
    status, detail = airflow_home.doctor(env={SETTING: "True"})["provider durable"]
    if airflow_home.version.startswith("2."):
        assert status == "warn" and "no airflow.sdk" in detail, detail
        probe = airflow_home.python(
            "-c", "import airflow, importlib.util; print(importlib.util.find_spec('airflow.sdk'))",
            env={SETTING: "True"},
        )  # fmt: skip
        assert probe.stdout.strip().splitlines()[-1] == "None", probe.stdout + probe.stderr
    else:
        assert status == "ok" and "on and active" in detail, detail
