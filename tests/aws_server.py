"""Real AWS APIs on loopback for the provider-operator tests: moto's server (moto[server] from
PyPI, in the dev env) in a subprocess, with what the tests need that moto lacks:

- Redshift Data statements finish: moto's stay STARTED forever, so here one turns FINISHED
  `job_seconds` after it was submitted (when it is next described);
- Glue job runs go STARTING → RUNNING → SUCCEEDED by moto's own state manager, one step per
  `job_seconds / 2`;
- Athena query executions go QUEUED → RUNNING → SUCCEEDED the same way, and a
  `StartQueryExecution` with a `ClientRequestToken` seen before returns that execution instead
  of starting another, as Athena does (moto ignores the token);
- a ledger: one JSON line per submission the service accepted (Redshift Data
  `ExecuteStatement`, Glue `StartJobRun`, Athena `StartQueryExecution`), which is what "how many
  jobs ran" is counted from. Its `logical` is the first quoted string of the SQL, or the run's
  `--logical` argument.

Run as a script it is the server (`python tests/aws_server.py PORT LEDGER JOB_SECONDS`).
"""

from __future__ import annotations

import contextlib
import json
import socket
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

    def airflow_connection(self) -> str:
        """`AIRFLOW_CONN_AWS_DEFAULT`: Airflow's default AWS connection, pointed here."""
        extra = {"endpoint_url": self.endpoint, "region_name": REGION}
        conn = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
        return json.dumps(conn)


@contextlib.contextmanager
def running_aws(workdir: Path, *, job_seconds: float = 6.0) -> Iterator[Aws]:
    """A fresh server on 127.0.0.1 with an empty ledger, stopped on exit."""
    from tests.postgres_server import free_port

    port = free_port()
    ledger = workdir / f"aws-ledger-{port}.jsonl"
    log = (workdir / f"aws-server-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, __file__, str(port), str(ledger), str(job_seconds)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the AWS server did not start on port {port}; see {log.name}")
            time.sleep(0.1)
        yield Aws(f"http://127.0.0.1:{port}", ledger)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _serve(port: int, ledger: Path, job_seconds: float) -> None:
    from moto.athena.responses import AthenaResponse
    from moto.glue.models import GlueBackend
    from moto.moto_api import state_manager
    from moto.redshiftdata.models import RedshiftDataAPIServiceBackend
    from moto.server import main

    def record(entry: dict[str, Any]) -> None:
        with ledger.open("a") as f:
            f.write(json.dumps(entry) + "\n")

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

    AthenaResponse.start_query_execution = start_query_execution  # type: ignore[method-assign]
    state_manager.set_transition(
        model_name="athena::execution",
        transition={"progression": "time", "seconds": job_seconds / 2},
    )
    RedshiftDataAPIServiceBackend.execute_statement = execute  # type: ignore[method-assign]
    RedshiftDataAPIServiceBackend.describe_statement = describe  # type: ignore[method-assign]
    GlueBackend.start_job_run = start  # type: ignore[method-assign]
    state_manager.set_transition(
        model_name="glue::job_run", transition={"progression": "time", "seconds": job_seconds / 2}
    )
    main(["-H", "127.0.0.1", "-p", str(port)])


if __name__ == "__main__":
    _serve(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
