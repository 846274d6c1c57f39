"""A real distributed Airflow: scheduler (+ api-server on 3.x) with the CeleryExecutor, a Redis
broker and result backend, and Celery workers, each in its own AIRFLOW_HOME. On Airflow 3 a
worker gets no `sql_alchemy_conn` (its default would be an empty SQLite file of its own home),
so its tasks reach Airflow only through the api-server and taskstate only through its `env`.

One deployment can serve several tests one after another: each starts its own worker (its own
home, ledgers and logs, its own taskstate settings) and triggers its own runs, waiting for
those runs only. The scheduler creates no scheduled runs (`use_job_schedule` off), so every DAG
is created unpaused."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from examples.airflow.demo import DAG_ID, Airflow, free_port
from tests.airflow.harness import EXAMPLE_DAGS, NO_REPARSE, copy_migrated_db, stop_group
from tests.redis_server import running_redis

CELERY_DAGS = Path(__file__).resolve().parent / "celery_dags"
# Airflow 3's simple auth manager: the tests trigger runs over its API as this user.
ADMIN = {"username": "admin", "password": "celery-admin-pw"}


class Worker:
    """A Celery worker's home: what its tasks wrote there (ledgers, logs)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def ledger(self, name: str) -> collections.Counter[Any]:
        path = self.home / name
        lines = path.read_text().splitlines() if path.exists() else []
        return collections.Counter(
            tuple(item) if isinstance(item, list) else item["id"] for item in map(json.loads, lines)
        )

    def task_logs(self, dag_id: str, task_id: str) -> str:
        logs = sorted(self.home.glob(f"logs/dag_id={dag_id}/**/task_id={task_id}/**/*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


class CeleryDeployment:
    def __init__(self, airflow: Airflow, root: Path, api_url: str) -> None:
        self.airflow = airflow
        self.root = root
        self.api_url = api_url  # the plugin's routes on the api-server (3.x) / webserver (2.x)

    @contextmanager
    def worker(
        self, name: str, env: Mapping[str, str] = {}, concurrency: int = 4
    ) -> Iterator[Worker]:
        """A worker with its own home and `env` on top of the deployment's settings; `{api_url}`
        in a value is the plugin's routes on this deployment. Stopped on leaving."""
        home = self.root / name
        home.mkdir()
        overrides = {k: v.replace("{api_url}", self.api_url) for k, v in env.items()}
        environ = {**self.airflow.environ, "AIRFLOW_HOME": str(home), **overrides}
        if self.airflow.major >= 3:  # tasks reach Airflow through the api-server only
            environ.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
        log = (self.root / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [str(self.airflow.env / "bin" / "airflow"), "celery", "worker",
             "--concurrency", str(concurrency)],
            env=environ, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            yield Worker(home)
        finally:
            stop_group(proc)
            log.close()

    def trigger(self, dag_id: str) -> str:
        """A new run of `dag_id`: on Airflow 3 through the api-server's REST API (as `airflow
        dags trigger` would, without an Airflow process of 5 CPU seconds each)."""
        run_id = f"ts_{uuid.uuid4().hex[:10]}"
        if self.airflow.major < 3:  # no api-server here
            self.airflow.run("dags", "trigger", dag_id, "--run-id", run_id)
            return run_id
        base = self.api_url.removesuffix("/taskstate")
        with httpx.Client(base_url=base, timeout=60) as http:
            login = http.post("/auth/token", json=ADMIN)
            login.raise_for_status()
            token = login.json()["access_token"]
            body = {"dag_run_id": run_id, "logical_date": datetime.now(timezone.utc).isoformat()}
            made = http.post(
                f"/api/v2/dags/{dag_id}/dagRuns",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
        assert made.status_code == 200, made.text
        return run_id

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        """The run's state, read from the metadata DB (no Airflow process per poll)."""
        query = "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?"
        rows = self.airflow.query(query, dag_id, run_id)
        return str(rows[0][0]) if rows else None

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 420) -> str:
        """Wait until the run finishes; returns its state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise TimeoutError(f"{dag_id} {run_id} did not finish in {timeout} s; see {self.root}")

    def trigger_and_wait(self, dag_id: str, timeout: float = 420) -> tuple[str, str]:
        """(run id, final state) of a new run of `dag_id`."""
        run_id = self.trigger(dag_id)
        return run_id, self.wait_for_run(dag_id, run_id, timeout)


@contextmanager
def celery_airflow(
    root: Path, version: str, *, extra: Mapping[str, str] = {}, concurrency: int = 4
) -> Iterator[CeleryDeployment]:
    """The deployment without workers: `deployment.worker(...)` starts them."""
    with running_redis() as redis:
        celery = {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"{redis}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"{redis}/1",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            # Airflow 3's task -> api-server calls: a loaded test machine needs more than 5 s.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            # Only the runs the tests trigger: none a worker of another test could pick up.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            # So no `airflow dags unpause` (an Airflow process each) before a DAG's first run.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            **NO_REPARSE,  # `dags reserialize` below parses them before the start
        }
        home = root / "airflow"
        home.mkdir()
        passwords = root / "passwords.json"
        passwords.write_text(json.dumps({ADMIN["username"]: ADMIN["password"]}))
        celery |= {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN['username']}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        }
        # The two DAGs the tests run, in a folder of their own: the home's `dags reserialize`
        # parses these, not every example (and no second reserialize after adding ours).
        dags = root / "dags"
        dags.mkdir()
        for dag_file in [EXAMPLE_DAGS / f"{DAG_ID}.py", *CELERY_DAGS.glob("*.py")]:
            shutil.copy(dag_file, dags / dag_file.name)
        celery["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        airflow = Airflow(home, version, extra={**celery, **extra}, migrated=copy_migrated_db)
        api_url = f"http://127.0.0.1:{airflow.environ['AIRFLOW__API__PORT']}/taskstate"
        with airflow.services():
            yield CeleryDeployment(airflow, root, api_url)
