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
