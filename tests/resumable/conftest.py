from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .driver import Env
from .jobsystem import JobSystem, running_jobsystem


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[JobSystem]:
    """The job system's table and its worker process, for one test."""
    with running_jobsystem(tmp_path / "jobs.db") as client:
        yield client


@pytest.fixture
def env(tmp_path: Path, jobs: JobSystem) -> Env:
    return Env(state_url=f"sqlite:///{tmp_path}/state.db", jobs_path=jobs.path)


@pytest.fixture
def pg_env(tmp_path: Path, jobs: JobSystem, postgres_url: str) -> Env:
    """The same, with the task state on the session's real PostgreSQL server."""
    from taskstate.backends.postgres import PostgresBackend

    backend = PostgresBackend(postgres_url)
    backend.migrate()
    backend.close()
    return Env(state_url=postgres_url, jobs_path=jobs.path)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_env(request: pytest.FixtureRequest) -> Env:
    """`env` and `pg_env` in turn: the task state on either backend."""
    env: Env = request.getfixturevalue("env" if request.param == "sqlite" else "pg_env")
    return env
