"""The skill's §5 example: `MyBatchOperator`, crash-safe with `ResumableJobMixin`, against a
small local job system (a SQLite table in $AIRFLOW_HOME) standing in for Spark, Databricks or
AWS Batch. A retry reconnects to the job its last try submitted instead of submitting another.
"""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path

from taskstate import ResumableJobMixin

try:
    from airflow.sdk import DAG, BaseOperator
except ImportError:  # Airflow 2
    from airflow.models import BaseOperator

    from airflow import DAG


class LocalJobs:
    """Jobs are PENDING for 1 s, RUNNING for 2 s, then SUCCEEDED. Like Databricks'
    `idempotency_token`, a second submission with a token already seen returns the first job."""

    @property
    def db(self) -> sqlite3.Connection:
        # Opened per call: an operator holding a connection could not be copied by Airflow.
        path = Path(os.environ.get("AIRFLOW_HOME", ".")) / "local_jobs.db"
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute(
            "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, name TEXT,"
            " token TEXT UNIQUE, submitted REAL)"
        )
        return db

    def submit(self, name: str, token: str | None) -> int:
        db = self.db
        cursor = db.execute(
            "INSERT OR IGNORE INTO jobs (name, token, submitted) VALUES (?, ?, ?)",
            (name, token, time.time()),
        )
        # No token (durable=False): every submission is a new job.
        if token is None:
            return int(cursor.lastrowid or 0)
        row = db.execute("SELECT id FROM jobs WHERE token = ?", (token,)).fetchone()
        return int(row[0])

    def find(self, token: str) -> int | None:
        row = self.db.execute("SELECT id FROM jobs WHERE token = ?", (token,)).fetchone()
        return None if row is None else int(row[0])

    def status(self, job_id: int) -> str:
        row = self.db.execute("SELECT submitted FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return "UNKNOWN"
        age = time.time() - row[0]
        return "PENDING" if age < 1 else "RUNNING" if age < 3 else "SUCCEEDED"


class MyBatchOperator(BaseOperator, ResumableJobMixin):
    external_id_key = "batch_job_id"  # key used in task_state_store; set once, never rename

    def __init__(self, *, job_name: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.jobs = LocalJobs()

    def execute(self, context):
        return self.execute_resumable(context)  # never call self.execute() — call this

    def submit_job(self, context):
        return self.jobs.submit(self.job_name, self.idempotency_token(context))

    def find_job(self, token, context):
        return self.jobs.find(token)

    def get_job_status(self, external_id, context) -> str:
        return self.jobs.status(external_id)

    def is_job_active(self, status: str) -> bool:
        return status in ("RUNNING", "PENDING", "QUEUED")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id, context) -> None:
        while (status := self.jobs.status(external_id)) != "SUCCEEDED":
            if not self.is_job_active(status):
                raise RuntimeError(f"job {external_id} ended {status}")
            time.sleep(0.5)

    def get_job_result(self, external_id, context):
        return {"job_id": external_id, "name": self.job_name}


with DAG(
    "batch_jobs",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
):
    MyBatchOperator(task_id="nightly", job_name="nightly-aggregate")
    # durable=False: a plain submit/poll/result, no state (e.g. for a test environment).
    MyBatchOperator.partial(task_id="per_region", durable=False).expand(job_name=["eu", "us"])
