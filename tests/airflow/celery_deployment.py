"""A real distributed Airflow: scheduler (+ api-server on 3.x) with the CeleryExecutor, a Redis
broker and result backend, and a Celery worker in its own AIRFLOW_HOME. On Airflow 3 the worker
gets no `sql_alchemy_conn` (its default would be an empty SQLite file of its own home), so its
tasks reach Airflow only through the api-server and taskstate only through `worker_env`."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from examples.airflow.demo import Airflow
from tests.redis_server import running_redis


class CeleryDeployment:
    def __init__(self, airflow: Airflow, worker_home: Path) -> None:
        self.airflow = airflow
        self.worker_home = worker_home

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
        }
        home = root / "airflow"
        home.mkdir()
        airflow = Airflow(home, version, extra={**celery, **extra})
        worker_home = root / "worker"
        worker_home.mkdir()
        env = {**airflow.environ, "AIRFLOW_HOME": str(worker_home), **worker_env}
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
                yield CeleryDeployment(airflow, worker_home)
            finally:
                os.killpg(worker.pid, signal.SIGTERM)
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait()
