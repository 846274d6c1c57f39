"""A real Airflow deployment on loopback: scheduler + LocalExecutor (+ dag-processor and
api-server on Airflow 3, which carries the Execution API the task's store calls go through).

Every process is ours, started in its own session and stopped (the whole group) on exit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from versus.envs import AirflowHome, log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Deployment:
    """`with Deployment(home, out, extra_env) as d: d.run(dag_id)` -> the tasks' reports."""

    def __init__(
        self, home: AirflowHome, out: Path, extra_env: dict[str, str], *, triggerer: bool = False
    ) -> None:
        self.home = home
        self.triggerer = triggerer
        self.out = out
        self.port = free_port()
        self.env = {
            **home.env,
            "VERSUS_OUT": str(out),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.port}",
            "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(self.port),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
            # Not 8793/8794: another Airflow on this machine may serve its logs there already.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            **extra_env,  # last: a workload may override the settings above
        }
        if triggerer:  # a dead triggerer's triggers move to a live one after this many seconds
            self.env.setdefault("AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD", "4")
            self.env.setdefault("AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC", "1")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.runs = 0

    def _start(self, *args: str) -> subprocess.Popen[bytes]:
        logfile = open(self.home.root / f"logs-{args[0]}.txt", "ab")  # noqa: SIM115 (closed at exit)
        self.procs.append(
            subprocess.Popen(
                self.home.command(*args),
                env=self.env,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                cwd=self.home.root,
                start_new_session=True,
            )
        )
        return self.procs[-1]

    def kill_triggerer(self) -> None:
        """SIGKILL the triggerer (its whole process group) and start a new one, as a crashed
        or redeployed triggerer is replaced; its triggers move over once the old one's
        heartbeat is stale."""
        for proc in self.procs:
            if proc.args[-1] == "triggerer" and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = [p for p in self.procs if p.poll() is None]
        self._start("triggerer")

    def __enter__(self) -> Deployment:
        try:
            if self.home.side.airflow_major >= 3:
                self._start("api-server", "--host", "127.0.0.1", "--port", str(self.port))
                self._start("dag-processor")
                self._wait(self._api_up, 180, "the api-server to answer")
            self._start("scheduler")
            if self.triggerer:
                self._start("triggerer")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def _api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/version", timeout=2):
                return True
        except OSError:
            return False

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"exited while waiting for {what}: {dead}; see {self.home.root}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; logs in {self.home.root}")
            time.sleep(1)

    def _query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        return self.home.query(sql, *params)

    def run(self, dag_id: str, tasks: int = 1, timeout: float = 900) -> list[dict[str, Any]]:
        """Trigger one run of `dag_id`, wait for it to finish, return its tasks' reports."""
        return self.finish(dag_id, self.start_run(dag_id), tasks, timeout)

    def start_run(self, dag_id: str) -> str:
        """Trigger one run of `dag_id` once it is parsed; its run id."""
        self._wait(
            lambda: self._query("SELECT 1 FROM serialized_dag WHERE dag_id = ?", dag_id),
            180,
            f"{dag_id} to be parsed",
        )
        self.runs += 1
        run_id = f"versus_{self.runs}_{int(time.time())}"
        self.home.airflow("dags", "trigger", dag_id, "--run-id", run_id, extra_env=self.env)
        return run_id

    def finish(
        self,
        dag_id: str,
        run_id: str,
        tasks: int = 1,
        timeout: float = 900,
        meanwhile: Any = None,
    ) -> list[dict[str, Any]]:
        """Wait for the run to finish (calling `meanwhile()` on every check); its reports."""

        def finished() -> bool:
            if meanwhile is not None:
                meanwhile()
            rows = self._query(
                "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id
            )
            if rows and rows[0][0] == "failed":
                raise RuntimeError(f"{dag_id} run {run_id} failed; logs in {self.home.root}")
            return bool(rows) and rows[0][0] == "success"

        self._wait(finished, timeout, f"{dag_id} run {run_id}")
        reports = [
            r
            for r in (json.loads(p.read_text()) for p in self.out.glob("*.json"))
            if r["run_id"] == run_id
        ]
        # A task instance may report more than once: Airflow 2 sometimes runs a try that
        # already succeeded again after a SIGKILL (see the crash workload).
        instances = {(r["task_id"], r["map_index"]) for r in reports}
        if len(instances) != tasks:
            raise RuntimeError(f"{dag_id} {run_id}: {len(instances)} tasks reported, not {tasks}")
        log(f"  {dag_id} under the scheduler: run {run_id} done")
        return reports
