"""Python environments and Airflow homes for the comparison.

Each side gets its own copy of a pinned environment, built by scripts/airflow-env.sh from the
same lock file under a bench-only root per checkout: the shared envs are used by the test
suite (which installs other checkouts of taskstate into them), and environment A must hold no
taskstate at all. Environment B gets this checkout installed, not editable: a bench measures
one snapshot.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".venv" / "bin" / "uv"
DAGS = Path(__file__).resolve().parent / "dags"
# One root per checkout: each installs its own taskstate into B, and two worktrees sharing an
# env would measure each other's code.
_CHECKOUT = f"{REPO.name}-{hashlib.sha256(str(REPO).encode()).hexdigest()[:8]}"
ENVS = Path(
    os.environ.get("VERSUS_ENVS") or Path.home() / ".cache/taskstate/versus-envs" / _CHECKOUT
)


# tests/postgres_server.py's server as the bench starts it (fsync on: a production setting).
POSTGRES_DURABILITY = "PostgreSQL 15, fsync=on, synchronous_commit=on"


def log(message: str) -> None:
    print(f"[versus {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _locked(*names: str) -> list[str]:
    """`name==version` for each name as pinned in requirements/dev.lock."""
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "requirements" / "dev.lock").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    )
    return [f"{name}=={pins[name].strip()}" for name in names]


def pinned_env(
    version: str, *, taskstate: bool, postgres: bool = False, airflow_postgres: bool = False
) -> Path:
    """The bench's own env for `version` (built once per lock), with or without taskstate.

    `postgres` adds our PostgreSQL driver, at the versions of requirements/dev.lock (the pinned
    Airflow locks carry none); `airflow_postgres` adds the driver Airflow's own metadata
    database needs on PostgreSQL (psycopg2, and asyncpg for Airflow 3's async engine).
    """
    root = ENVS / ("with-taskstate" if taskstate else "airflow-only")
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "airflow-env.sh"), version],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "TASKSTATE_ENVS": str(root)},
    ).stdout
    env = Path(out.strip().splitlines()[-1])
    python = str(env / "bin" / "python")
    if postgres:
        drivers = _locked("psycopg", "psycopg-binary", "psycopg-pool")
        subprocess.run(
            [str(UV), "pip", "install", "--quiet", "--python", python, *drivers], check=True
        )
    if airflow_postgres:
        subprocess.run(
            # psycopg2 for the metadata DB, asyncpg for Airflow 3's async engine on it
            [
                str(UV),
                "pip",
                "install",
                "--quiet",
                "--python",
                python,
                "psycopg2-binary",
                "asyncpg",
            ],
            check=True,
        )
    if taskstate:
        subprocess.run(
            [
                str(UV),
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--reinstall-package",
                "taskstate",
                "--python",
                python,
                str(REPO),
            ],
            check=True,
        )
    else:
        found = subprocess.run([python, "-c", "import taskstate"], capture_output=True)
        if found.returncode == 0:
            raise RuntimeError(f"{env} must not contain taskstate (environment A)")
    return env


@dataclass
class Side:
    """One column of the report: an Airflow version and whose state store it uses."""

    name: str  # e.g. "A: Airflow 3.3.2 native"
    airflow: str  # pinned env version, e.g. "3.3"
    taskstate: bool
    backend: str = "sqlite"  # taskstate backend: "sqlite" (embedded) or "postgresql"
    metadata: str = "sqlite"  # Airflow's metadata database
    synchronous: str = "normal"  # taskstate's embedded SQLite: ?synchronous=...
    env: Path = field(default=Path())

    @property
    def airflow_major(self) -> int:
        return int(self.airflow.split(".")[0])

    @property
    def metadata_label(self) -> str:
        return {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[self.metadata]

    @property
    def store_label(self) -> str:
        """Where this side's state lives, and how durably it commits."""
        if not self.taskstate:  # Airflow 3.3's store lives in its metadata database
            if self.metadata == "sqlite":
                # Airflow sets journal_mode=WAL on connect and leaves synchronous at SQLite's
                # default, FULL (the journal mode is read back from the file in describe()).
                return "metadata DB: SQLite, WAL, synchronous=FULL"
            return f"metadata DB: {POSTGRES_DURABILITY}"
        if self.backend == "postgresql":
            return f"taskstate: {POSTGRES_DURABILITY}"
        return f"taskstate: SQLite file, WAL, synchronous={self.synchronous.upper()}"

    def prepare(self) -> None:
        self.env = pinned_env(
            self.airflow,
            taskstate=self.taskstate,
            postgres=self.backend == "postgresql",
            airflow_postgres=self.metadata == "postgresql",
        )


class AirflowHome:
    """A throwaway AIRFLOW_HOME with the bench DAGs and its own metadata database (a SQLite
    file, or the PostgreSQL server at `metadata_url`); B's state goes to `server_url` when its
    backend is PostgreSQL, else to `taskstate.db` in the home."""

    def __init__(
        self,
        side: Side,
        root: Path,
        server_url: str | None = None,
        migrated: Callable[[str, Path], None] | None = None,
    ) -> None:
        """`migrated(version, root)`, if given, puts an already migrated SQLite metadata DB in
        the home instead of `airflow db migrate` (the tests keep one per version)."""
        self.side = side
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        (root / "dags").mkdir(parents=True)
        shutil.copy(DAGS / "versus_dags.py", root / "dags")
        self.db = root / "airflow.db"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.db}",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__WEBSERVER__SECRET_KEY": secrets.token_hex(16),
            "PATH": f"{side.env / 'bin'}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        self.metadata_url = None
        if side.metadata == "postgresql" and server_url:
            self.metadata_url = server_url.replace("postgresql://", "postgresql+psycopg2://", 1)
            self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.metadata_url
        self.taskstate_url = server_url if side.backend == "postgresql" else None
        if side.taskstate:
            # Explicit: with a PostgreSQL metadata DB our default would follow it there.
            sqlite_url = f"sqlite:///{self.taskstate_db}"
            if side.synchronous != "normal":
                sqlite_url += f"?synchronous={side.synchronous}"
            url = self.taskstate_url or sqlite_url
            self.env["AIRFLOW__STATE_STORE__TASKSTATE_URL"] = url
        if self.taskstate_url:
            # A server backend is never migrated implicitly: the admin's step, done once.
            subprocess.run(
                [str(side.env / "bin" / "taskstate"), "db", "migrate"],
                env=self.env,
                check=True,
                capture_output=True,
            )
        if migrated is None or self.metadata_url:
            self.airflow("db", "migrate")
        else:
            migrated(side.airflow, root)

    @property
    def taskstate_db(self) -> Path:
        return self.root / "taskstate.db"

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        """Read Airflow's metadata database (`?` placeholders)."""
        if self.metadata_url:
            import psycopg

            url = self.metadata_url.replace("+psycopg2", "")
            with psycopg.connect(url) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(sql, params).fetchall()

    def command(self, *args: str) -> list[str]:
        return [str(self.side.env / "bin" / "python"), "-m", "airflow", *args]

    def airflow(self, *args: str, extra_env: dict[str, str] | None = None) -> float:
        """Run one Airflow CLI command to completion; return its wall time in seconds."""
        logfile = self.root / "logs-cli.txt"
        started = time.perf_counter()
        with open(logfile, "a") as out:
            out.write(f"\n$ airflow {' '.join(args)}\n")
            out.flush()
            done = subprocess.run(
                self.command(*args),
                env={**self.env, **(extra_env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            command = " ".join(args)
            raise RuntimeError(f"airflow {command} failed ({done.returncode}); see {logfile}")
        return wall
