"""A real distributed Airflow: scheduler (+ api-server on 3.x) with the CeleryExecutor, a Redis
broker and result backend, and a Celery worker in its own AIRFLOW_HOME. On Airflow 3 the worker
gets no `sql_alchemy_conn` (its default would be an empty SQLite file of its own home), so its
tasks reach Airflow only through the api-server and taskstate only through `worker_env`."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from examples.airflow.demo import Airflow, free_port
from tests.airflow.harness import copy_migrated_db
from tests.redis_server import running_redis

CELERY_DAGS = Path(__file__).resolve().parent / "celery_dags"


class CeleryDeployment:
    def __init__(self, airflow: Airflow, worker_home: Path, api_url: str) -> None:
        self.airflow = airflow
        self.worker_home = worker_home
        self.api_url = api_url  # the plugin's routes on the api-server (3.x) / webserver (2.x)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        listing = ["dags", "list-runs", *(["-d"] if self.airflow.major < 3 else []), dag_id]
        out = self.airflow.run(*listing, "-o", "json")
        # Airflow 2 may print log lines (which start with "[2026-...") before the JSON.
        (json_line,) = [line for line in out.splitlines() if line.startswith(("[{", "[]"))]
        runs: list[dict[str, Any]] = json.loads(json_line)
        return runs

    def trigger_and_wait(self, dag_id: str, timeout: float = 420) -> str:
        """Trigger a run of `dag_id` and wait until it finishes; returns its state."""
        self.airflow.run("dags", "unpause", dag_id)
        self.airflow.run("dags", "trigger", dag_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {run["state"] for run in self.runs(dag_id)}
            if states & {"success", "failed"}:
                return str(states.pop())
            time.sleep(3)
        raise TimeoutError(f"{dag_id} did not finish in {timeout} s; see {self.airflow.home}")

    def ledger(self, name: str) -> collections.Counter[Any]:
        path = self.worker_home / name
        lines = path.read_text().splitlines() if path.exists() else []
        return collections.Counter(
            tuple(item) if isinstance(item, list) else item["id"] for item in map(json.loads, lines)
        )

    def task_logs(self, dag_id: str, task_id: str) -> str:
        logs = sorted(self.worker_home.glob(f"logs/dag_id={dag_id}/**/task_id={task_id}/**/*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


@contextmanager
def celery_deployment(
    root: Path,
    version: str,
    *,
    extra: Mapping[str, str] = {},
    worker_env: Mapping[str, str] = {},
    concurrency: int = 4,
) -> Iterator[CeleryDeployment]:
    with running_redis() as redis:
        celery = {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"{redis}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"{redis}/1",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            # Airflow 3's task -> api-server calls: a loaded test machine needs more than 5 s.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        }
        home = root / "airflow"
        home.mkdir()
        airflow = Airflow(home, version, extra={**celery, **extra}, migrated=copy_migrated_db)
        for dag_file in CELERY_DAGS.glob("*.py"):
            shutil.copy(dag_file, home / "dags" / dag_file.name)
        airflow.run("dags", "reserialize")
        worker_home = root / "worker"
        worker_home.mkdir()
        api_url = f"http://127.0.0.1:{airflow.environ['AIRFLOW__API__PORT']}/taskstate"
        # `{api_url}` in a worker setting: the plugin's routes on this deployment's api-server.
        overrides = {k: v.replace("{api_url}", api_url) for k, v in worker_env.items()}
        env = {**airflow.environ, "AIRFLOW_HOME": str(worker_home), **overrides}
        if airflow.major >= 3:  # tasks reach Airflow through the api-server only
            env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
        with airflow.services():
            log = (root / "worker.log").open("w")
            worker = subprocess.Popen(
                [str(airflow.env / "bin" / "airflow"), "celery", "worker",
                 "--concurrency", str(concurrency)],
                env=env, cwd=worker_home, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                yield CeleryDeployment(airflow, worker_home, api_url)
            finally:
                os.killpg(worker.pid, signal.SIGTERM)
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait()
