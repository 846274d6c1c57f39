"""A small real external job system for crash tests: a SQLite job table and a worker process.

Clients (`JobSystem`) submit jobs and read their status from any process; the worker
(`python jobsystem.py worker DB`, started by `running_jobsystem`) moves every job
PENDING → RUNNING → SUCCEEDED/FAILED as time passes. Every submission call is recorded, so a
test counts what a job system would bill: jobs created per logical job.

A submission may carry a client token. With `dedupe=True` (Databricks `idempotency_token`,
EMR/SageMaker `ClientToken`, BigQuery's client-chosen job id) a second submission with the same
token returns the first job instead of creating one. The token is kept as a label either way,
so `find(token)` can look a job up by it (what `find_job` does for systems without dedupe).

Standard library only: the worker runs as a plain script.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PENDING, RUNNING, SUCCEEDED, FAILED, UNKNOWN = (
    "PENDING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "UNKNOWN",
)
ACTIVE = frozenset({PENDING, RUNNING})

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    logical  TEXT NOT NULL,
    token    TEXT,
    state    TEXT NOT NULL,
    created  REAL NOT NULL,
    started  REAL,
    run_for  REAL NOT NULL,
    outcome  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_token ON jobs (token);
CREATE TABLE IF NOT EXISTS submissions (
    n        INTEGER PRIMARY KEY AUTOINCREMENT,
    logical  TEXT NOT NULL,
    token    TEXT,
    job_id   INTEGER NOT NULL,
    deduped  INTEGER NOT NULL
);
"""


class Submission(NamedTuple):
    # A NamedTuple, not a dataclass: loaders that exec this file without registering it in
    # sys.modules (bench/versus, its DAGs) break dataclasses under postponed annotations.
    logical: str
    token: str | None
    job_id: int
    deduped: bool


class JobSystem:
    """A client of the job table; open one per process (connections do not cross fork)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def submit(
        self,
        logical: str,
        *,
        token: str | None = None,
        dedupe: bool = True,
        run_for: float = 0.05,
        outcome: str = SUCCEEDED,
    ) -> int:
        """Create a job (or, with `dedupe` and a known token, return the existing one)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = None
            if token is not None and dedupe:
                row = db.execute(
                    "SELECT id FROM jobs WHERE token = ? ORDER BY id LIMIT 1", (token,)
                ).fetchone()
            if row is not None:
                job_id = int(row[0])
            else:
                cur = db.execute(
                    "INSERT INTO jobs (logical, token, state, created, run_for, outcome) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (logical, token, PENDING, time.time(), run_for, outcome),
                )
                job_id = int(cur.lastrowid or 0)
            db.execute(
                "INSERT INTO submissions (logical, token, job_id, deduped) VALUES (?, ?, ?, ?)",
                (logical, token, job_id, row is not None),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return job_id

    def status(self, job_id: object) -> str:
        row = self._db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return UNKNOWN if row is None else str(row[0])

    def result(self, job_id: object) -> dict[str, object]:
        """What a succeeded job produced: its logical job's name, so callers can check it."""
        row = self._db.execute("SELECT logical, state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row[1] != SUCCEEDED:
            raise RuntimeError(f"job {job_id!r} has no result (state {row and row[1]})")
        return {"job_id": job_id, "output": expected_output(row[0])}

    def find(self, token: str) -> int | None:
        row = self._db.execute(
            "SELECT id FROM jobs WHERE token = ? ORDER BY id DESC LIMIT 1", (token,)
        ).fetchone()
        return None if row is None else int(row[0])

    def jobs_for(self, logical: str) -> list[tuple[int, str]]:
        rows = self._db.execute(
            "SELECT id, state FROM jobs WHERE logical = ? ORDER BY id", (logical,)
        ).fetchall()
        return [(int(i), str(s)) for i, s in rows]

    def submissions_for(self, logical: str) -> list[Submission]:
        rows = self._db.execute(
            "SELECT logical, token, job_id, deduped FROM submissions WHERE logical = ? ORDER BY n",
            (logical,),
        ).fetchall()
        return [Submission(lg, tok, int(j), bool(d)) for lg, tok, j, d in rows]

    def release(self, logical: str) -> None:
        """End the run of `logical`'s jobs now (a held job): the worker's next step finishes
        them with their outcome."""
        self._db.execute("UPDATE jobs SET run_for = 0 WHERE logical = ?", (logical,))

    def advance(self, now: float, pending_for: float) -> None:
        """One worker step: start jobs that waited long enough, finish those that ran."""
        db = self._db
        db.execute(
            "UPDATE jobs SET state = ?, started = ? WHERE state = ? AND created <= ?",
            (RUNNING, now, PENDING, now - pending_for),
        )
        db.execute(
            "UPDATE jobs SET state = outcome WHERE state = ? AND started + run_for <= ?",
            (RUNNING, now),
        )


def expected_output(logical: str) -> str:
    return f"output-of-{logical}"


def work(path: str, *, tick: float = 0.003, pending_for: float = 0.01) -> None:
    """The worker loop; it stops when its parent closes our stdin."""
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    jobs = JobSystem(path)
    while not stop.wait(tick):
        jobs.advance(time.time(), pending_for)


@contextlib.contextmanager
def running_jobsystem(path: str | Path) -> Iterator[JobSystem]:
    """Create the job table, start its worker process, yield a client; stop the worker after."""
    client = JobSystem(path)
    worker = subprocess.Popen(
        [sys.executable, __file__, "worker", str(path)], stdin=subprocess.PIPE
    )
    try:
        yield client
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        client.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "worker":
        sys.exit("usage: jobsystem.py worker DB")
    work(sys.argv[2])
