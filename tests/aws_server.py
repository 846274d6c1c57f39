"""Real AWS APIs on loopback for the provider-operator tests: moto's server (moto[server] from
PyPI, in the dev env) in a subprocess, with what the tests need that moto lacks:

- Redshift Data statements finish: moto's stay STARTED forever, so here one turns FINISHED
  `job_seconds` after it was submitted (when it is next described);
- Glue job runs go STARTING → RUNNING → SUCCEEDED by moto's own state manager, one step per
  `job_seconds / 2`;
- Athena query executions go QUEUED → RUNNING → SUCCEEDED the same way, and a
  `StartQueryExecution` with a `ClientRequestToken` seen before returns that execution instead
  of starting another, as Athena does (moto ignores the token);
- Batch runs without Docker (moto's "simple" Batch), but a job stays RUNNING `job_seconds` before
  it succeeds (moto's would succeed at once); ECS tasks go RUNNING → … → STOPPED (exit 0) by
  moto's state manager, one step per `job_seconds / 4`;
- held jobs (`running_aws(..., released=path)`, for Athena, Batch and ECS): a job stays RUNNING
  whatever the time until its logical job is listed in the `released` file (one per line,
  written by whoever is told the job may end), then it succeeds, so nothing in a test depends
  on how long a try took;
- a ledger: one JSON line per submission the service accepted (Redshift Data
  `ExecuteStatement`, Glue `StartJobRun`, Athena `StartQueryExecution`, Batch `SubmitJob`, ECS
  `RunTask`), which is what "how many jobs ran" is counted from. Its `logical` is the first
  quoted string of the SQL, the Glue run's `--logical` argument, the Batch job's `logical`
  parameter, or the ECS container override's `LOGICAL` environment variable.

Run as a script it is the server (`python tests/aws_server.py PORT LEDGER JOB_SECONDS
[RELEASED]`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REGION = "us-east-1"


@dataclass(frozen=True)
class Aws:
    endpoint: str
    ledger: Path

    def submissions(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]

    def create_job_queues(self) -> None:
        """What the Batch and ECS operators of the tests run on: Batch compute environment
        `ts-env`, queue `ts-queue`, job definition `ts-job`; ECS cluster `ts`, task definition
        `ts-app` (one container, `app`)."""
        import boto3

        def client(name: str) -> Any:
            return boto3.client(
                name, endpoint_url=self.endpoint, region_name=REGION,
                aws_access_key_id="testing", aws_secret_access_key="testing",
            )  # fmt: skip

        role = client("iam").create_role(RoleName="ts-batch", AssumeRolePolicyDocument="{}")
        batch = client("batch")
        env = batch.create_compute_environment(
            computeEnvironmentName="ts-env", type="UNMANAGED", serviceRole=role["Role"]["Arn"]
        )
        order = [{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}]
        batch.create_job_queue(
            jobQueueName="ts-queue", state="ENABLED", priority=1, computeEnvironmentOrder=order
        )
        batch.register_job_definition(
            jobDefinitionName="ts-job", type="container",
            containerProperties={"image": "busybox", "vcpus": 1, "memory": 128},
        )  # fmt: skip
        ecs = client("ecs")
        ecs.create_cluster(clusterName="ts")
        ecs.register_task_definition(
            family="ts-app",
            containerDefinitions=[{"name": "app", "image": "busybox", "memory": 64}],
        )

    def airflow_connection(self) -> str:
        """`AIRFLOW_CONN_AWS_DEFAULT`: Airflow's default AWS connection, pointed here."""
        extra = {"endpoint_url": self.endpoint, "region_name": REGION}
        conn = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
        return json.dumps(conn)


@contextlib.contextmanager
def running_aws(
    workdir: Path, *, job_seconds: float = 6.0, released: Path | None = None
) -> Iterator[Aws]:
    """A fresh server on 127.0.0.1 with an empty ledger, stopped on exit. With `released`,
    Athena, Batch and ECS jobs are held RUNNING until their logical job is listed there."""
    from tests.postgres_server import free_port, stop_server, wait_for_port

    port = free_port()
    ledger = workdir / f"aws-ledger-{port}.jsonl"
    log = (workdir / f"aws-server-{port}.log").open("wb")
    held = [] if released is None else [str(released)]
    proc = subprocess.Popen(
        [sys.executable, __file__, str(port), str(ledger), str(job_seconds), *held],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, f"the AWS server (log: {log.name})")
        aws = Aws(f"http://127.0.0.1:{port}", ledger)
        aws.create_job_queues()
        yield aws
    finally:
        stop_server(proc)
        log.close()


def released_jobs(released: Path | None) -> set[str] | None:
    """The logical jobs listed in the `released` file (None: jobs are not held)."""
    if released is None:
        return None
    return set(released.read_text().splitlines()) if released.exists() else set()


def _serve(port: int, ledger: Path, job_seconds: float, released: Path | None) -> None:
    import inspect

    from moto.athena.models import AthenaBackend
    from moto.athena.responses import AthenaResponse
    from moto.batch.models import BatchBackend
    from moto.batch_simple.models import BatchSimpleBackend
    from moto.core.config import default_user_config
    from moto.ecs.models import EC2ContainerServiceBackend
    from moto.glue.models import GlueBackend
    from moto.moto_api import state_manager
    from moto.redshiftdata.models import RedshiftDataAPIServiceBackend
    from moto.server import main

    logical_of: dict[str, Any] = {}  # job id -> its logical job

    def record(entry: dict[str, Any]) -> None:
        logical_of[entry["id"]] = entry.get("logical")
        with ledger.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def is_released(job_id: str) -> bool:
        return logical_of.get(job_id) in (released_jobs(released) or ())

    def finished(job_id: str, started: float) -> bool:
        """Held jobs end when released; the others `job_seconds` after they started."""
        if released is not None:
            return is_released(job_id)
        return time.monotonic() - started > job_seconds

    # Held: moto's state manager never moves Athena or ECS on by itself (`finished` does).
    moved_on = {"progression": "manual", "times": sys.maxsize} if released is not None else None

    execute_statement = RedshiftDataAPIServiceBackend.execute_statement
    describe_statement = RedshiftDataAPIServiceBackend.describe_statement
    submitted: dict[str, float] = {}

    def execute(self: Any, **kwargs: Any) -> Any:
        statement = execute_statement(self, **kwargs)
        submitted[statement.id] = time.monotonic()
        logical = kwargs["sql"].split("'")[1] if "'" in kwargs["sql"] else None
        record({"service": "redshift-data", "id": statement.id, "logical": logical})
        return statement

    def describe(self: Any, statement_id: str) -> Any:
        statement = describe_statement(self, statement_id)
        started = submitted.get(statement.id)
        if statement.status == "STARTED" and started and time.monotonic() - started > job_seconds:
            statement.status = "FINISHED"
        return statement

    start_job_run = GlueBackend.start_job_run

    def start(self: Any, name: str, arguments: Any, *rest: Any) -> Any:
        run_id = start_job_run(self, name, arguments, *rest)
        logical = (arguments or {}).get("--logical")
        record({"service": "glue", "id": run_id, "job": name, "logical": logical})
        return run_id

    start_query = AthenaResponse.start_query_execution
    by_token: dict[str, str] = {}

    def start_query_execution(self: Any) -> Any:
        token = self._get_param("ClientRequestToken")
        if token in by_token:
            return json.dumps({"QueryExecutionId": by_token[token]})
        answer = start_query(self)
        if isinstance(answer, str):  # accepted (an error comes back as a tuple)
            execution_id = json.loads(answer)["QueryExecutionId"]
            if token:
                by_token[token] = execution_id
            query = self._get_param("QueryString")
            logical = query.split("'")[1] if "'" in query else None
            record({"service": "athena", "id": execution_id, "logical": logical})
        return answer

    get_query_execution = AthenaBackend.get_query_execution

    def get_held_query_execution(self: Any, exec_id: str) -> Any:
        execution = get_query_execution(self, exec_id)
        if released is not None:
            execution.status = "SUCCEEDED" if is_released(exec_id) else "RUNNING"
        return execution

    AthenaResponse.start_query_execution = start_query_execution  # type: ignore[method-assign]
    AthenaBackend.get_query_execution = get_held_query_execution  # type: ignore[method-assign]
    state_manager.set_transition(
        model_name="athena::execution",
        transition=moved_on or {"progression": "time", "seconds": job_seconds / 2},
    )
    default_user_config["batch"] = {"use_docker": False}
    batch_started: dict[str, float] = {}
    submit_batch = BatchSimpleBackend.submit_job
    describe_batch = BatchBackend.describe_jobs

    def submit_batch_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(submit_batch).bind(self, *args, **kwargs)
        name, job_id, arn = submit_batch(self, *args, **kwargs)
        logical = (bound.arguments.get("parameters") or {}).get("logical")
        record({"service": "batch", "id": job_id, "job": name, "logical": logical})
        return name, job_id, arn

    def start_batch_job(self: Any, include_start_attempt: bool, job: Any) -> None:
        self.backend._jobs[job.job_id] = job
        job.job_started_at = datetime.datetime.now()
        job.log_stream_name = job._stream_name
        if include_start_attempt:
            job._start_attempt()
        job.status = "RUNNING"
        batch_started[job.job_id] = time.monotonic()

    def describe_batch_jobs(self: Any, jobs: Any) -> Any:
        for job_id in jobs or []:
            started = batch_started.get(job_id)
            if started is not None and finished(job_id, started):
                self._jobs[job_id]._mark_stopped(success=True)
        return describe_batch(self, jobs)

    BatchSimpleBackend.submit_job = submit_batch_job  # type: ignore[method-assign]
    BatchSimpleBackend._mark_job_as_finished = start_batch_job  # type: ignore[method-assign]
    BatchBackend.describe_jobs = describe_batch_jobs  # type: ignore[method-assign]

    run_ecs_task = EC2ContainerServiceBackend.run_task

    def run_task(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(run_ecs_task).bind(self, *args, **kwargs)
        tasks = run_ecs_task(self, *args, **kwargs)
        overrides = bound.arguments.get("overrides") or {}
        env = [e for c in overrides.get("containerOverrides", []) for e in c.get("environment", [])]
        logical = next((e["value"] for e in env if e["name"] == "LOGICAL"), None)
        for task in tasks:
            record({"service": "ecs", "id": task.task_arn, "logical": logical})
        return tasks

    describe_ecs_tasks = EC2ContainerServiceBackend.describe_tasks

    def describe_tasks(self: Any, *args: Any, **kwargs: Any) -> Any:
        tasks = describe_ecs_tasks(self, *args, **kwargs)
        for task in tasks:
            if released is not None and is_released(task.task_arn):
                task.last_status = "STOPPED"
            if task.last_status == "STOPPED":  # as ECS: the containers stopped, exit code 0
                task.desired_status = "STOPPED"
                for container in task.containers:
                    container.last_status = "STOPPED"
        return tasks

    EC2ContainerServiceBackend.run_task = run_task  # type: ignore[method-assign]
    EC2ContainerServiceBackend.describe_tasks = describe_tasks  # type: ignore[method-assign]
    state_manager.set_transition(
        model_name="ecs::task",
        transition=moved_on or {"progression": "time", "seconds": job_seconds / 4},
    )
    RedshiftDataAPIServiceBackend.execute_statement = execute  # type: ignore[method-assign]
    RedshiftDataAPIServiceBackend.describe_statement = describe  # type: ignore[method-assign]
    GlueBackend.start_job_run = start  # type: ignore[method-assign]
    state_manager.set_transition(
        model_name="glue::job_run", transition={"progression": "time", "seconds": job_seconds / 2}
    )
    main(["-H", "127.0.0.1", "-p", str(port)])


if __name__ == "__main__":
    held = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    _serve(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), held)
