from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from tests.pgbouncer_server import PgBouncer, running_pgbouncer
from tests.postgres_server import PostgresServer, running_server

from taskstate import StateStore
from taskstate.settings import Settings

# Hypothesis in CI: the same examples on every run (derandomized) and a fixed budget, so a
# failure reproduces and the suite's time is bounded. `HYPOTHESIS_PROFILE=explore` for more.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class Clock:
    """A settable clock, so expiry is tested without sleeping."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[StateStore]:
    with StateStore(db_url, settings=Settings(), clock=clock) as s:
        yield s


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session (tests marked `postgres`)."""
    with running_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode, 4 server connections, in front of the session's
    server. A test that needs it fails (never skips) when it cannot start."""
    with running_pgbouncer(postgres_server) as bouncer:
        yield bouncer


@pytest.fixture(params=["direct", "pgbouncer"])
def pg_route(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """The two lanes to PostgreSQL: directly, and through PgBouncer in transaction pooling mode
    (how the Airflow Helm chart and most large deployments reach it). Maps a URL of the session's
    server to the URL the test uses."""
    if request.param == "direct":
        return lambda url: url
    bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
    return bouncer.route


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """A new, empty database (no taskstate schema) on the session's server."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
