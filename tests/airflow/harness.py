"""Real Airflow for tests: a pinned env per version (scripts/airflow-env.sh), this checkout
installed into it, and a throwaway AIRFLOW_HOME with a SQLite metadata DB migrated once."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from taskstate import StateStore
from taskstate.scope import TaskScope, parse_namespace, task_prefix
from taskstate.settings import Settings

REPO = Path(__file__).resolve().parents[2]
TEST_DAGS = Path(__file__).resolve().parent / "dags"
EXAMPLE_DAGS = REPO / "examples" / "dags"
DATE = "2025-01-01"
_FINISHED = re.compile(r"DagRun Finished: dag_id=(\S+?),.*?state=(\w+)")
# One `airflow dags test` of a batch: dag_id, logical date (or None), extra env, expected state.
DagsTest = tuple[str, str | None, Mapping[str, str], str]
# Not batched (yet): their `dags test` builds the in-process execution API anew for every task
# (a new event-loop thread, Cadwyn generating its versioned routes: 40% of a 3.2 `dags test`'s
# CPU), which a batch does not save, and a batch of them was not seen through to the end on
# this machine (at a load of ~20 one task's start took minutes). Each run keeps its process.
_ONE_DAGS_TEST_A_PROCESS = ("3.0", "3.1", "3.2")
CLI_BATCH = Path(__file__).resolve().parent / "cli_batch.py"
_BATCHED = re.compile(
    r"^===== taskstate-cli-batch (\d+) start\n(.*?)^===== taskstate-cli-batch \1 end rc=(-?\d+)$",
    re.MULTILINE | re.DOTALL,
)


# Airflow reparses every DAG file every 30 s by default (a process each, the provider DAGs'
# imports alone a CPU second): a deployment whose DAG files are all there when it starts and
# never change parses each once. The section moved in Airflow 3.0; each version reads its own.
NO_REPARSE = {
    "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "3600",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
}


def versions() -> list[str]:
    return os.environ.get("TASKSTATE_AIRFLOW_VERSIONS", "").split()


def pinned() -> list[str]:
    """Every Airflow version with a pinned env (requirements/airflow-X.Y.lock), oldest first."""
    found = [
        p.name[len("airflow-") : -len(".lock")]
        for p in (REPO / "requirements").glob("airflow-*.lock")
    ]
    return sorted(found, key=lambda v: tuple(map(int, v.split("."))))


def not_selected(candidates: Iterable[str]) -> str:
    """A skip reason naming the versions a test needs, none of them selected: the words
    scripts/junit_check.py allows in a lane that left those versions out."""
    return f"Airflow {' / '.join(candidates)} not selected (TASKSTATE_AIRFLOW_VERSIONS)"


def airflow_env(version: str) -> Path:
    """The cached, shared env for `version` (Airflow and its pins only)."""
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "airflow-env.sh"), version],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def checkout_overlay(env: Path, target: Path) -> Path:
    """This checkout, built and installed into `target` (for PYTHONPATH), entry points and all.

    Never into the shared env itself: other checkouts run their own taskstate on the same env.
    """
    if not (target / "taskstate").is_dir():
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "uv"), "pip", "install", "--quiet", "--no-deps",
             "--python", str(env / "bin" / "python"), "--target", str(target), str(REPO)],
            check=True,
        )  # fmt: skip
    return target


_MIGRATED: dict[str, Path] = {}
# The wait for a version's template database (`airflow db migrate` once per lane): the first
# test of that version to need an Airflow home pays it before its own waits (conftest.py).
MIGRATE_TIMEOUT = 900


def migrated_db(version: str) -> Path:
    """A SQLite `airflow.db` that `airflow db migrate` made once per version in this test
    process; every home on SQLite copies it instead of migrating its own (each migrate is
    a fresh Airflow process: 15 s idle, 100 s on a loaded machine). Nothing in it names a home."""
    if version not in _MIGRATED:
        root = Path(tempfile.mkdtemp(prefix=f"taskstate-airflow-{version}-db-"))
        atexit.register(shutil.rmtree, root, True)
        env = airflow_env(version)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        subprocess.run(
            [str(env / "bin" / "airflow"), "db", "migrate"],
            env={**base, "AIRFLOW_HOME": str(root), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                 "PYTHONPATH": str(checkout_overlay(env, root / "taskstate-checkout"))},
            cwd=root, check=True, capture_output=True, timeout=MIGRATE_TIMEOUT,
        )  # fmt: skip
        _MIGRATED[version] = root / "airflow.db"
    return _MIGRATED[version]


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM an Airflow service started in its own session (and its children), SIGKILL
    after 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def copy_migrated_db(version: str, home: Path) -> None:
    shutil.copy(migrated_db(version), home / "airflow.db")


class AirflowHome:
    def __init__(
        self, version: str, root: Path, dag_files: Iterable[Path], extra_env: Mapping[str, str] = {}
    ) -> None:
        self.version = version
        self.env = airflow_env(version)
        self.overlay = checkout_overlay(self.env, root / "taskstate-checkout")
        self.home = root
        self.dags = root / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)
        for path in dag_files:
            shutil.copy(path, self.dags / path.name)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        self.environ = {
            **base,
            "AIRFLOW_HOME": str(root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PATH": f"{self.env / 'bin'}:{base.get('PATH', '')}",
            "PYTHONPATH": str(self.overlay),
            **extra_env,
        }
        if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in self.environ:  # its own database
            self.airflow("db", "migrate")
        else:
            copy_migrated_db(version, root)
        if version == "3.0":  # its `dags test` fails on assets no DAG processor registered
            self.airflow("dags", "reserialize")

    @property
    def airflow_version(self) -> str:
        """The exact version pinned for this env ("3.2.2")."""
        lock = (REPO / "requirements" / f"airflow-{self.version}.lock").read_text()
        return re.search(r"^apache-airflow==(\S+)", lock, re.MULTILINE).group(1)  # type: ignore[union-attr]

    def airflow(
        self, *args: str, env: Mapping[str, str] = {}, check: bool = True, timeout: float = 600
    ) -> str:
        proc = subprocess.run(
            [str(self.env / "bin" / "airflow"), *args],
            env={**self.environ, **env},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = proc.stdout + proc.stderr
        log = self.home / "airflow-cli.log"
        with log.open("a") as f:
            f.write(f"\n===== airflow {' '.join(args)} (rc={proc.returncode})\n{output}")
        if check and proc.returncode != 0:
            raise AssertionError(
                f"airflow {' '.join(args)} failed ({proc.returncode}):\n{output[-4000:]}"
            )
        return output

    def airflow_batch(
        self, commands: Iterable[tuple[Sequence[str], Mapping[str, str]]], timeout: float = 1800
    ) -> list[tuple[int, str]]:
        """(exit code, output) of each `airflow` command (its arguments, its extra env), all
        run in one process (tests/airflow/cli_batch.py): one Airflow import for the lot."""
        batch = [{"argv": list(argv), "env": dict(env)} for argv, env in commands]
        proc = subprocess.run(
            [str(self.env / "bin" / "python"), str(CLI_BATCH), json.dumps(batch)],
            env=self.environ, cwd=self.home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=timeout,
        )  # fmt: skip
        with (self.home / "airflow-cli.log").open("a") as f:
            f.write(f"\n===== airflow batch {batch} (rc={proc.returncode})\n{proc.stdout}")
        found = {int(n): (int(rc), out) for n, out, rc in _BATCHED.findall(proc.stdout)}
        if proc.returncode != 0 or sorted(found) != list(range(len(batch))):
            raise AssertionError(
                f"airflow batch failed ({proc.returncode}):\n{proc.stdout[-6000:]}"
            )
        return [found[n] for n in range(len(batch))]

    def python(self, *args: str, env: Mapping[str, str] = {}) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.env / "bin" / "python"), *args],
            env={**self.environ, **env},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def doctor(self, env: Mapping[str, str] = {}) -> dict[str, tuple[str, str]]:
        proc = self.python("-m", "taskstate", "doctor", "--json", env=env)
        return {c["check"]: (c["status"], c["detail"]) for c in json.loads(proc.stdout)}

    def dags_test(
        self,
        dag_id: str,
        date: str | None = None,
        *,
        env: Mapping[str, str] = {},
        expect: str = "success",
    ) -> str:
        dated = [date] if date else []
        output = self.airflow("dags", "test", dag_id, *dated, env=env, check=False)
        return self._finished(dag_id, output, expect)

    def dags_tests(self, runs: Iterable[DagsTest]) -> list[str]:
        """The output of each `airflow dags test` (dag_id, date or None, extra env, expected
        state), all in one process (`airflow_batch`) where the version allows, each checked as
        `dags_test` checks one."""
        runs = list(runs)
        commands = [
            (["dags", "test", dag, *([day] if day else [])], env) for dag, day, env, _ in runs
        ]
        if self.version in _ONE_DAGS_TEST_A_PROCESS:
            outputs = [self.airflow(*argv, env=env, check=False) for argv, env in commands]
        else:
            outputs = [output for _, output in self.airflow_batch(commands)]
        return [
            self._finished(dag_id, output, expect)
            for (dag_id, _, _, expect), output in zip(runs, outputs, strict=True)
        ]

    @staticmethod
    def finished_run_id(dag_id: str, output: str) -> str:
        """The run id of the run of `dag_id` that `dags test` printed as finished in `output`."""
        (run_id,) = re.findall(
            rf"DagRun Finished: dag_id={re.escape(dag_id)},.*?run_id=(\S+?),", output
        )
        return str(run_id)

    def _finished(self, dag_id: str, output: str, expect: str) -> str:
        states = [s for d, s in _FINISHED.findall(output) if d == dag_id]
        assert states and states[-1] == expect, (
            f"{dag_id} on Airflow {self.version}: run {states or 'never finished'}, "
            f"expected {expect}\n{output[-6000:]}"
        )
        return output

    def store(self) -> StateStore:
        return StateStore(f"sqlite:///{self.home}/taskstate.db", settings=Settings())

    def run_ids(self, dag_id: str) -> set[str]:
        with self.store() as store:
            return {
                parse_namespace(row.namespace).run_id  # type: ignore[union-attr]
                for row in store.backend.scan(task_prefix(dag_id))
            }

    def task_states(
        self, dag_id: str, task_id: str, run_id: str | None = None
    ) -> dict[int, dict[str, Any]]:
        """map_index -> {key: value} for `task_id`'s state in the DAG's (only) run, or in
        `run_id`."""
        found: dict[int, dict[str, Any]] = {}
        runs = set()
        with self.store() as store:
            for row in store.backend.scan(task_prefix(dag_id)):
                scope = parse_namespace(row.namespace)
                assert isinstance(scope, TaskScope)
                if scope.task_id == task_id and run_id in (None, scope.run_id):
                    runs.add(scope.run_id)
                    found.setdefault(scope.map_index, {})[row.key] = store.load_value(row.value)
        assert len(runs) <= 1, f"state of {dag_id}.{task_id} under several runs: {runs}"
        return found
