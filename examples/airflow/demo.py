"""The main job, for real: Airflow (one pinned version, SQLite metadata DB, the embedded
taskstate store) runs `etl_with_checkpoint` under its scheduler and LocalExecutor. Try 1 of
`process_records` is SIGKILLed right after record 7's checkpoint; the retry resumes at record 8.
Every record must be processed exactly once. Then the state is printed with the taskstate CLI.

    python examples/airflow/demo.py            # what scripts/demo.sh runs
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VERSION = "3.2"
DAG_ID, TASK_ID = "etl_with_checkpoint", "process_records"
KILL_AT = 7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Airflow:
    """An AIRFLOW_HOME with the example DAGs, this checkout and a SQLite metadata DB."""

    def __init__(
        self,
        home: Path,
        version: str = VERSION,
        extra: Mapping[str, str] = {},
        migrated: Callable[[str, Path], None] | None = None,
    ) -> None:
        """`migrated(version, home)`, if given, puts an already migrated SQLite metadata DB
        into the home instead of `airflow db migrate` (the tests keep one per version)."""
        out = subprocess.run(
            ["bash", str(REPO / "scripts" / "airflow-env.sh"), version],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        self.env = Path(out.strip().splitlines()[-1])
        self.home = home
        overlay = home / "taskstate-checkout"
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "uv"), "pip", "install", "--quiet", "--no-deps",
             "--python", str(self.env / "bin" / "python"), "--target", str(overlay), str(REPO)],
            check=True,
        )  # fmt: skip
        dags = home / "dags"
        shutil.copytree(REPO / "examples" / "dags", dags, ignore=shutil.ignore_patterns("__*"))
        port = self.port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        self.environ = {
            **base,
            "AIRFLOW_HOME": str(home),
            "PYTHONPATH": str(overlay),
            "PATH": f"{self.env / 'bin'}:{base.get('PATH', '')}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "taskstate-demo-secret",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
            "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(port),  # Airflow 2 has no api-server
            # Not 8793/8794: another Airflow on this machine may serve its logs there already.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            **extra,
        }
        self.major = int(version.split(".")[0])
        if migrated is None or "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in extra:
            self.run("db", "migrate")
        else:
            migrated(version, home)
        self.run("dags", "reserialize")

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            [str(self.env / "bin" / "airflow"), *args],
            env=self.environ, cwd=self.home, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def taskstate(self, *args: str) -> str:
        proc = subprocess.run(
            [str(self.env / "bin" / "python"), "-m", "taskstate", *args],
            env=self.environ, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return proc.stdout + proc.stderr

    @contextmanager
    def services(self) -> Iterator[None]:
        """The scheduler with its LocalExecutor (and, on Airflow 3, the API server tasks use)."""
        names = ["api-server", "scheduler"] if self.major >= 3 else ["scheduler"]
        procs = []
        try:
            for name in names:
                log = (self.home / f"{name}.log").open("w")
                procs.append(
                    subprocess.Popen(
                        [str(self.env / "bin" / "airflow"), name],
                        env=self.environ,
                        cwd=self.home,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                if name == "api-server":  # a task queued before it answers is lost (SIGKILLed)
                    self._wait_for_api(procs[-1])
            yield
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()

    def _wait_for_api(self, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/api/v2/version"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the api-server did not answer; see {self.home}") from None
                time.sleep(1)

    def task_tries(self) -> list[tuple[str, int]]:
        """(state, try_number) of every instance of the ETL task, from the metadata DB."""
        query = "SELECT state, try_number FROM task_instance WHERE dag_id = ? AND task_id = ?"
        return [(str(state), int(tries)) for state, tries in self.query(query, DAG_ID, TASK_ID)]

    def query(self, sql: str, *params: str) -> list[list[Any]]:
        """Rows of a query (`?` placeholders) on the metadata DB: the SQLite file directly, a
        PostgreSQL one over psycopg (the tests' own driver; a poll every 2 s that started a
        Python importing SQLAlchemy cost the loaded lane about a CPU second each)."""
        conn = self.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
        if not conn or conn.startswith("sqlite"):
            with sqlite3.connect(self.home / "airflow.db", timeout=30) as db:
                return [list(row) for row in db.execute(sql, params).fetchall()]
        import psycopg  # only the tests run Airflow on PostgreSQL; the demo needs no driver

        url = "postgresql://" + conn.split("://", 1)[1]  # without SQLAlchemy's "+psycopg2"
        with psycopg.connect(url) as db:
            return [list(row) for row in db.execute(sql.replace("?", "%s"), params).fetchall()]

    def wait_for(self, state: str, try_number: int, timeout: float = 420) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (state, try_number) in self.task_tries():
                return
            time.sleep(2)
        raise TimeoutError(
            f"{DAG_ID}.{TASK_ID} never reached {state} on try {try_number}: {self.task_tries()}; "
            f"see {self.home}/*.log"
        )

    def ledger(self) -> collections.Counter[int]:
        return ledger(self.home)


def ledger(home: Path) -> collections.Counter[int]:
    """How often each record was processed: the ETL DAG's ledger in the AIRFLOW_HOME `home`."""
    path = home / "etl_ledger.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return collections.Counter(json.loads(line)["id"] for line in lines)


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="taskstate-airflow-demo-"))
    print(f"Airflow {VERSION} (pinned env), AIRFLOW_HOME={home}, LocalExecutor, SQLite")
    airflow = Airflow(home, extra={"TASKSTATE_DEMO_KILL_AT": str(KILL_AT)})
    with airflow.services():
        airflow.run("dags", "unpause", DAG_ID)  # catchup=False: one scheduled run
        print(f"{DAG_ID}: try 1 will be SIGKILLed right after record {KILL_AT}'s checkpoint")
        airflow.wait_for("success", 2)
    ledger = airflow.ledger()
    print(f"try 2 resumed and finished; records processed: {sorted(ledger)}")
    twice = {record: n for record, n in ledger.items() if n != 1}
    if sorted(ledger) != list(range(1, 21)) or twice:
        print(f"FAILED: not exactly once: {dict(ledger)}")
        return 1
    print("every record processed exactly once (20 records, 2 tries, one SIGKILL)")
    print("\n$ taskstate task list --dag-id etl_with_checkpoint")
    print(airflow.taskstate("task", "list", "--dag-id", DAG_ID))
    return 0


if __name__ == "__main__":
    sys.exit(main())
