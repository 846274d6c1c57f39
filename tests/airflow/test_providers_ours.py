"""taskstate.providers' operators, real provider code from PyPI, SIGKILLed (or failed) at each
point of a submission: one job per logical job, and the task's result is that job's.

Services on loopback: moto for Athena, Batch and ECS (tests/aws_server.py), fakes of dbt Cloud
and Airbyte (tests/job_services.py); each counts the jobs it accepted and holds each job RUNNING
until the task's waiting try lists it as released, so every point is reached with the job
running, whatever the load. One DAG run per version:

- Airflow 3.2, the shared running deployment (scheduler + LocalExecutor): try 1 SIGKILLed,
  every kill point its own task, each operator once;
- Airflow 2.10, its shared deployment (scheduler + SequentialExecutor, one try at a time, 2.10's
  older provider releases): try 1 SIGKILLed, every kill point its own task, one operator of
  each provider package (Airbyte inside the window, ECS while polling, dbt Cloud after the id
  is saved);
- Airflow 3.3, `airflow dags test` (tasks in the command's own process: the fault is an
  exception, and a try costs little): every operator inside the window and after saving the
  id, Batch while polling too (the retry's path is the one after saving the id); every operator in
  deferrable mode failed after saving the id, before `defer()`; and every operator starting
  with the id of another client's job in its state (`verify_job` must refuse it).

The DAG: tests/airflow/provider_dags/ts_providers_ours.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.airflow.deployment import Deployments
from tests.airflow.harness import AirflowHome, not_selected, versions
from tests.aws_server import running_aws
from tests.job_services import running_services

pytestmark = pytest.mark.airflow

DAG_FILE = Path(__file__).with_name("provider_dags") / "ts_providers_ours.py"
KILLS = ("in_window", "after_persist", "while_polling")
OPERATORS = ("athena", "batch", "ecs", "dbt_cloud", "airbyte")
# Every operator inside the window and after the id is saved; while polling (whose retry
# reconnects as after the id is saved) Batch on 3.3, others under the schedulers.
EVERY = [f"{op}_{p}" for op in OPERATORS for p in KILLS[:2]] + ["batch_while_polling"]
FOREIGN = [f"{op}_foreign_id" for op in OPERATORS]
EACH_POINT = [
    f"{op}_{point}"
    for op, point in zip(
        OPERATORS, ("while_polling", "after_persist", *["in_window"] * 3), strict=True
    )
]
SEQUENTIAL = ["airbyte_in_window", "ecs_while_polling", "dbt_cloud_after_persist"]
DEFERRED = [f"{op}_before_defer" for op in OPERATORS]
# The DAG's `ts_providers_ours_each_point` is EACH_POINT, `ts_providers_ours_sequential`
# SEQUENTIAL, `ts_providers_ours_dags_test` EVERY + DEFERRED + FOREIGN.


def foreign_jobs(aws: Any, fakes: Any) -> dict[str, Any]:
    """One job per service that no task of the DAG submitted (its logical job is "foreign")."""
    import boto3
    import httpx

    def client(name: str) -> Any:
        return boto3.client(
            name, endpoint_url=aws.endpoint, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip

    overrides = {"containerOverrides": [{"name": "app", "environment": [
        {"name": "LOGICAL", "value": "foreign|ecs"}]}]}  # fmt: skip
    with httpx.Client(verify=str(fakes.ca_bundle)) as http:
        dbt = http.post(
            f"https://{fakes.dbt_host}/api/v2/accounts/7/jobs/42/run/",
            json={"cause": "foreign|dbt"},
        ).json()["data"]["id"]
        airbyte = http.post(
            f"{fakes.airbyte_url}/jobs", json={"connectionId": "foreign|airbyte", "jobType": "sync"}
        ).json()["jobId"]
    return {
        "athena": client("athena").start_query_execution(
            QueryString="SELECT 'foreign|athena'",
            ResultConfiguration={"OutputLocation": "s3://results/"},
        )["QueryExecutionId"],
        "batch": client("batch").submit_job(
            jobName="ts_foreign_id",
            jobQueue="ts-queue",
            jobDefinition="ts-job",
            parameters={"logical": "foreign|batch"},
        )["jobId"],
        "ecs": client("ecs").run_task(
            cluster="ts", taskDefinition="ts-app", launchType="FARGATE", overrides=overrides
        )["tasks"][0]["taskArn"],
        "dbt_cloud": dbt,
        "airbyte": airbyte,
    }


@contextlib.contextmanager
def services(workdir: Path) -> Iterator[tuple[dict[str, Any], Any]]:
    """Every service, holding each job RUNNING until its task lists it in `released`, and
    `ledger(run_id)`: task -> [job ids the services accepted for it]."""
    out = workdir / "out"
    out.mkdir(parents=True)
    released = workdir / "released"
    with (
        running_aws(workdir, released=released) as aws,
        running_services(workdir, released=released) as fakes,
    ):
        endpoints = {
            "aws": aws.endpoint,
            "dbt": fakes.dbt_host,
            "airbyte": fakes.airbyte_url,
            "ca": str(fakes.ca_bundle),
            "out": str(out),
            "released": str(released),
            "foreign": foreign_jobs(aws, fakes),
        }

        def ledger(run_id: str) -> dict[str, list[Any]]:
            jobs: dict[str, list[Any]] = {}
            for entry in aws.submissions() + fakes.submissions():
                run, _, task = str(entry["logical"]).partition("|")
                if run == run_id:
                    jobs.setdefault(task, []).append(entry["id"])
            return jobs

        yield endpoints, ledger


def reports(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def decisions(task: str) -> list[str]:
    """What each try of `task` decides (the DAG's `<task>.decisions`): try 1 submits; a retry
    finds its job still running (the services hold it) and reconnects to it: to the id it saved,
    or, killed inside the window, to the job `find_job` recognises (Athena, which has none,
    resubmits under the same ClientRequestToken and gets the same query back). A task that
    starts with another client's job id refuses it and submits its own."""
    operator, point = next((task[: -len(p) - 1], p) for p in (*KILLS, "before_defer",
                           "foreign_id") if task.endswith("_" + p))  # fmt: skip
    if point == "foreign_id":
        return ["1 terminal_resubmit"]
    if point != "in_window":
        return ["1 fresh_submit", "2 reconnect"]
    return ["1 fresh_submit", "2 recover_from_intent" if operator == "athena" else
            "2 reconnect recovered"]  # fmt: skip


def check(
    tasks: list[str],
    out: Path,
    jobs: dict[str, list[Any]],
    foreign: dict[str, Any] | None = None,
) -> None:
    """Each task: one job, the result the operator returns for that job, the decisions above;
    a killed task was retried once; a task that started with a foreign id ran its own job."""
    found = reports(out)
    assert sorted(found) == sorted(tasks), sorted(found)
    one_each = Counter(dict.fromkeys(tasks, 1))
    assert Counter({t: len(ids) for t, ids in jobs.items()}) == one_each, jobs
    for task in tasks:
        report, (job,) = found[task], jobs[task]
        if task.endswith("_foreign_id"):
            assert foreign is not None
            assert report["try_number"] == 1, report
            assert job != foreign[task.removesuffix("_foreign_id")], report
        else:
            assert report["try_number"] == 2, report  # try 1 died
        assert report["stored"] == job, (task, report, job)
        # ECS returns the task's last log line (None without CloudWatch logs); the others the id
        assert report["result"] == (None if task.startswith("ecs_") else job), (task, report)
        tried = (out / f"{task}.decisions").read_text().splitlines()
        assert tried == decisions(task), (task, tried)
        deferred = task.endswith("_before_defer")  # the result came from the trigger's return
        assert report["via"] == ("execute_complete" if deferred else "execute"), (task, report)


# Its own waits: starting the deployment (240 s) and the run (600 s), after migrating.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("version", "dag_id", "tasks"), [
    ("3.2", "ts_providers_ours_each_point", EACH_POINT),
    ("2.10", "ts_providers_ours_sequential", SEQUENTIAL),
])  # fmt: skip
def test_sigkilled_at_each_point_one_job_per_logical_job(
    version: str, dag_id: str, tasks: list[str], deployments: Deployments, tmp_path: Path
) -> None:
    if version not in versions():
        pytest.skip(not_selected([version]))
    deployment = deployments.get(version, extra_dags=[DAG_FILE])
    if not (deployment.home.dags / DAG_FILE.name).exists():  # started by an earlier test
        shutil.copy(DAG_FILE, deployment.home.dags)
        deployment.home.airflow("dags", "reserialize")
    with services(tmp_path) as (endpoints, ledger):
        run_id = deployment.trigger(dag_id, conf={"services": endpoints})
        deployment.wait_for_run(dag_id, run_id, timeout=600)
        jobs = ledger(run_id)
    check(tasks, Path(endpoints["out"]), jobs, endpoints["foreign"])


@pytest.fixture(scope="module")
def home_33(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    if "3.3" not in versions():
        pytest.skip(not_selected(["3.3"]))
    return AirflowHome("3.3", tmp_path_factory.mktemp("providers-3.3"), [DAG_FILE])


# Its own waits: the home's CLI setup (600 s), `dags test` (600 s), the services (120 + 60 s).
@pytest.mark.timeout(1500)
def test_dags_test_every_point_and_deferrable_one_job_per_logical_job(
    home_33: AirflowHome, tmp_path: Path
) -> None:
    """`dags test` runs the tasks in its own process, so a fault is an exception: every operator
    fails inside the window (the id's write fails) and after saving the id, Batch while polling;
    in deferrable mode, after saving the id and before `defer()`: its try 2 defers on that job
    with the provider's own trigger (which the command runs inline) and completes it from the
    task's state (`via` execute_complete)."""
    with services(tmp_path) as (endpoints, ledger):
        env = {"TS_PROVIDER_FAULT": "raise", "TS_SERVICES": json.dumps(endpoints)}
        home_33.dags_test("ts_providers_ours_dags_test", env=env)
        found = reports(Path(endpoints["out"]))
        jobs = ledger(next(iter(found.values()))["run_id"]) if found else {}
    check(EVERY + DEFERRED + FOREIGN, Path(endpoints["out"]), jobs, endpoints["foreign"])


PROBE = """
import json
from taskstate.providers.amazon import BatchOperator
from taskstate.providers.dbt_cloud import DbtCloudRunJobOperator
args = {"job_name": "j", "job_queue": "q", "job_definition": "d"}
print(json.dumps({
    "default": BatchOperator(task_id="a", **args).durable,
    "argument": BatchOperator(task_id="b", durable=False, **args).durable,
    "default_args": BatchOperator(task_id="c", default_args={"durable": False}, **args).durable,
    "partial": DbtCloudRunJobOperator.partial(
        task_id="d", default_args={"durable": False}
    ).expand(job_id=[1]).partial_kwargs.get("durable"),
    "key": DbtCloudRunJobOperator.external_id_key,
}))
"""


def test_durable_is_taken_in_every_spelling(home_33: AirflowHome) -> None:
    """`durable=False` as an argument, in `default_args` and in `.partial()` (the classes sit on
    a mixin subclass, which Airflow's metaclass would otherwise skip for `default_args`)."""
    out = home_33.python("-c", PROBE)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "default": True,
        "argument": False,
        "default_args": False,
        "partial": False,
        "key": "dbt_cloud_run_id",
    }, out.stderr[-3000:]
