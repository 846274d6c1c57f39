"""The count catalog behind `/dags`' key counts (docs/backends.md, "Key counts of /dags"): kept
exact by triggers on every write path, on SQLite and PostgreSQL (directly and through
PgBouncer), expired rows never counted, read through its indexes (EXPLAIN), and filled by the
migration for a store that held rows before it."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from tests.backends.test_seek import _pg_plan

from taskstate import StateStore, TaskScope
from taskstate.backends import postgres as pg
from taskstate.backends import sqlite as lite
from taskstate.backends.base import Row, StateBackend
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.discovery import KEY_COUNT_CAP
from taskstate.scope import task_prefix
from taskstate.settings import Settings

DAGS = ["etl", "etl_daily", "etlx", "ml"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A store on each backend; PostgreSQL also through PgBouncer in transaction pooling mode
    (the SQL must hold no session state)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state.db"
    request.applymarker(pytest.mark.postgres)
    fresh: str = request.getfixturevalue("fresh_postgres_url")
    if request.param == "postgres":
        return fresh
    route: Callable[[str], str] = request.getfixturevalue("pgbouncer").route
    return route(fresh)


def _exact(backend: StateBackend, now: float) -> tuple[list[int], list[int]]:
    """The catalog's counts, and the same counted range by range (what they must equal)."""
    return backend.dag_counts(DAGS, now), backend.counts([task_prefix(d) for d in DAGS], now)


def test_counts_stay_exact_through_every_write_path(url: str) -> None:
    clock = Clock()
    settings = Settings(history_versions=10)
    with StateStore(url, settings=settings, clock=clock) as store:
        store.migrate()
        backend = store.backend

        def check() -> None:
            catalog, ranges = _exact(backend, clock.now)
            assert catalog == ranges

        scopes = [
            TaskScope(d, f"run_{r}", f"t{t}") for d in DAGS for r in range(2) for t in range(3)
        ]
        for scope in scopes:  # creates
            store.task_state(scope).set("a", 1)
            store.task_state(scope).set("b", 2)
        check()
        assert backend.dag_counts(DAGS, clock.now) == [12, 12, 12, 12]
        for scope in scopes:  # overwrites, a compare-and-set, an update, a create-only
            state = store.task_state(scope)
            state.set("a", 3)
            assert state.compare_and_set("b", 2, 4)
            state.update("n", lambda n: (n or 0) + 1)
        check()
        store.task_state(scopes[0]).delete("a")
        store.task_state(scopes[0]).delete("missing")
        check()
        before = datetime.fromtimestamp(clock.now, timezone.utc)
        clock.now += 10
        store.clear_task("etl", "run_0", "t1")  # one task instance
        store.task_state(scopes[2]).clear()
        check()
        assert store.restore_task("etl", "run_0", "t1", as_of=before) == 3  # restore
        check()
        store.import_entries(  # import: two new keys, one existing
            [
                (TaskScope("ml", "run_9", "t"), "k1", 1, None, None, None),
                (TaskScope("ml", "run_9", "t"), "k2", 1, None, None, None),
                (scopes[-1], "a", 9, None, None, None),
            ]
        )
        check()
        # Expiry: keys that expire are never counted once expired, before and after cleanup.
        store.task_state(TaskScope("etl_daily", "run_0", "t0")).set(
            "soon", 1, retention=timedelta(days=1)
        )
        store.task_state(TaskScope("etlx", "r", "t")).set("soon", 1, retention=timedelta(days=1))
        check()
        alive = backend.dag_counts(DAGS, clock.now)
        clock.now += 2 * 86400
        catalog, ranges = _exact(backend, clock.now)
        assert catalog == ranges and catalog != alive
        store.cleanup()
        check()
        assert store.discovery().dags().items == list(zip(DAGS, ranges, strict=True))


def test_past_the_expired_bound_each_dag_is_counted_by_range(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More uncleaned expired rows than the bound: the counts are still exact, by range."""
    clock = Clock()
    with StateStore(url, settings=Settings(), clock=clock) as store:
        store.migrate()
        for i in range(5):
            store.task_state(TaskScope("etl", "r", f"t{i}")).set(
                "k", 1, retention=timedelta(days=1)
            )
            store.task_state(TaskScope("ml", "r", f"t{i}")).set("k", 1)
        clock.now += 2 * 86400
        module = lite if url.startswith("sqlite") else pg
        monkeypatch.setattr(module, "_EXPIRED_BOUND", 3)
        assert store.backend.dag_counts(["etl", "ml"], clock.now, cap=4) == [0, 4]
        monkeypatch.setattr(module, "_EXPIRED_BOUND", 10)
        assert store.backend.dag_counts(["etl", "ml"], clock.now) == [0, 5]


def _writer(url: str, dag: str, who: int, rounds: int) -> None:
    """Create and delete keys of one DAG (each its own task instances), with overwrites."""
    backend: StateBackend = (
        SQLiteBackend(url) if url.startswith("sqlite") else pg.PostgresBackend(url)
    )
    for i in range(rounds):
        ns = TaskScope(dag, f"run_{i % 3}", f"w{who}_{i % 7}").namespace
        backend.set(ns, f"k{i}", "1", None, 1.0)
        backend.set(ns, f"k{i}", "2", None, 1.0)
        if i % 3 == 0:
            backend.delete(ns, f"k{i}")
        if i % 10 == 9:
            backend.clear(ns)
    backend.close()


def test_counts_stay_exact_with_writers_in_two_processes(url: str) -> None:
    SQLiteBackend(url).schema_status() if url.startswith("sqlite") else pg.PostgresBackend(
        url
    ).migrate()
    ctx = mp.get_context("spawn")
    writers = [ctx.Process(target=_writer, args=(url, "etl", who, 120)) for who in range(2)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(120)
        assert p.exitcode == 0
    backend = SQLiteBackend(url) if url.startswith("sqlite") else pg.PostgresBackend(url)
    catalog = backend.dag_counts(["etl"], 2.0)
    assert catalog == backend.counts([task_prefix("etl")], 2.0) and catalog[0] > 0
    backend.close()


# -- the plans --------------------------------------------------------------------------------


def test_sqlite_reads_the_catalog_and_the_expiry_index(tmp_path: Any) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/state.db")
    conn = backend._conn()
    params = {"now": 1.0, "bound": 10001, "lo": "t\x1f", "hi": "t "}
    plan = " / ".join(
        r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + lite._EXPIRED_BY_DAG, params)
    )
    assert f"USING COVERING INDEX {lite.TABLE}_expires" in plan, plan
    assert f"SCAN {lite.TABLE} " not in plan + " ", plan
    sql = lite._DAG_KEYS_OF.format("?, ?")
    plan = " / ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, ["a", "b"]))
    assert f"SEARCH {lite.DAG_KEYS} USING PRIMARY KEY (dag=?)" in plan, plan
    backend.close()


@pytest.mark.postgres
def test_postgres_reads_the_catalog_and_the_expiry_index(fresh_postgres_url: str) -> None:
    backend = pg.PostgresBackend(fresh_postgres_url)
    backend.migrate()
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        rows = [(TaskScope(f"d{i % 40}", "r", f"t{i}").namespace, f"k{i}") for i in range(4000)]
        with conn.cursor().copy(
            f"COPY {pg.TABLE} (namespace, key, value, expires_at, updated_at) FROM STDIN"
        ) as copy:
            for i, (ns, key) in enumerate(rows):
                copy.write_row((ns, key, "1", 0.5 if i % 10 == 0 else 5.0, 0.0))
        conn.execute("ANALYZE")
        nodes = _pg_plan(
            conn,
            pg._DAG_COUNTS,
            {"dags": ["d1", "d2"], "now": 1.0, "bound": 2001, "filled": pg._FILLS_DAG_KEYS},
        )
    scanned = [n for n in nodes if n.startswith("Seq Scan")]
    assert scanned in ([], [f"Seq Scan {pg.VERSION_TABLE} "]), nodes  # (a row per step)
    assert any(n.endswith(f" {pg.TABLE}_expires") for n in nodes), nodes  # (maybe a bitmap)
    assert any(n.endswith(f" {pg.DAG_KEYS}_pkey") for n in nodes), nodes
    assert backend.dag_counts(["d1", "d2"], 1.0) == backend.counts(
        [task_prefix("d1"), task_prefix("d2")], 1.0
    )
    backend.close()


# -- the migration ----------------------------------------------------------------------------


def _old_rows() -> Iterator[tuple[str, str]]:
    for d in range(7):
        for k in range(d * 3 + 1):
            yield TaskScope(f"dag_{d}", "r", f"t{k % 2}").namespace, f"k{k}"


def test_sqlite_migration_counts_the_rows_already_there(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for step in lite.MIGRATIONS[: lite._FILLS_DAG_KEYS - 1]:
        conn.executescript(step)
    conn.executemany(
        f"INSERT INTO {lite.TABLE} (namespace, key, value, expires_at, updated_at) "
        "VALUES (?, ?, '1', NULL, 0)",
        _old_rows(),
    )
    conn.execute(f"PRAGMA user_version = {lite._FILLS_DAG_KEYS - 1}")
    conn.close()
    monkeypatch.setattr(lite, "_FILL_SLICE_S", 0.0)  # one DAG per transaction
    monkeypatch.setattr(lite, "_FILL_PAUSE_S", 0.0)
    backend = SQLiteBackend(f"sqlite:///{path}")
    dags = [f"dag_{d}" for d in range(7)]
    assert backend.dag_counts(dags, 1.0) == [d * 3 + 1 for d in range(7)]
    assert backend.schema_status().current == len(lite.MIGRATIONS)
    assert backend._conn().execute(f"SELECT * FROM {lite.DAG_KEYS_FILL}").fetchall() == []
    backend.close()


@pytest.mark.postgres
def test_postgres_migration_counts_the_rows_already_there(fresh_postgres_url: str) -> None:
    backend = pg.PostgresBackend(fresh_postgres_url)
    backend.migrate()
    step = pg._FILLS_DAG_KEYS
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {pg.DAG_KEYS} CASCADE")  # as before the step (its triggers:)
        conn.execute(f"DROP TRIGGER {pg.DAG_KEYS}_created ON {pg.TABLE}")
        conn.execute(f"DROP TRIGGER {pg.DAG_KEYS}_deleted ON {pg.TABLE}")
        conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version >= %s", (step,))
        for ns, key in _old_rows():
            conn.execute(
                f"INSERT INTO {pg.TABLE} (namespace, key, value, updated_at) "
                "VALUES (%s, %s, '1', 0)",
                (ns, key),
            )
    backend.close()
    backend = pg.PostgresBackend(fresh_postgres_url)
    assert backend.migrate() == list(range(step, len(pg.MIGRATIONS) + 1))
    dags = [f"dag_{d}" for d in range(7)]
    assert backend.dag_counts(dags, 1.0) == [d * 3 + 1 for d in range(7)]
    backend.set(TaskScope("dag_0", "r", "new").namespace, "k", "1", None, 1.0)
    assert backend.dag_counts(["dag_0"], 1.0) == [2]
    backend.close()


def test_counts_are_capped(url: str) -> None:
    with StateStore(url, settings=Settings(), clock=Clock()) as store:
        store.migrate()
        backend = store.backend
        ns = TaskScope("big", "r", "t").namespace
        backend.set_many([Row(ns, f"k{i}", "1", None, 1.0, None) for i in range(30)])
        assert backend.dag_counts(["big"], 2.0, cap=KEY_COUNT_CAP + 1) == [30]
        assert backend.dag_counts(["big"], 2.0, cap=7) == [7]


def test_the_dags_listed_from_the_catalog_are_the_skip_scans(url: str) -> None:
    """A DAG whose keys all expired or were deleted is not listed; the order, the counts and
    the totals are what the skip scan and range counts give (SQLite lists from the catalog)."""
    clock = Clock()
    with StateStore(url, settings=Settings(), clock=clock) as store:
        store.migrate()
        for dag in ["a", "a b", "a_b", "b", "expired", "gone", "z"]:
            state = store.task_state(TaskScope(dag, "r", "t"))
            state.set("k", 1, retention=timedelta(days=1) if dag == "expired" else None)
            state.set("k2", 2)
        store.task_state(TaskScope("expired", "r", "t")).delete("k2")
        store.task_state(TaskScope("gone", "r", "t")).clear()
        clock.now += 2 * 86400
        backend = store.backend
        listed = backend.live_dags(clock.now, -1)
        assert listed is None or listed == [("a", 2), ("a b", 2), ("a_b", 2), ("b", 2), ("z", 2)]
        found = store.discovery()
        dags = backend.groups("t\x1f", clock.now)
        assert dags == ["a", "a b", "a_b", "b", "z"]
        counts = backend.counts([task_prefix(d) for d in dags], clock.now)
        assert found.dags().items == list(zip(dags, counts, strict=True))
        page = found.dags(limit=2, offset=1)
        assert (page.items, page.total, page.exact) == ([("a b", 2), ("a_b", 2)], 4, False)
        assert found.dags(pattern="b").items == [("a b", 2), ("a_b", 2), ("b", 2)]


@pytest.mark.postgres
def test_postgres_counts_by_range_while_a_migrate_still_fills_the_catalog(
    fresh_postgres_url: str,
) -> None:
    """A taskstate already serving while `db migrate` fills the catalog (its step applied, not
    yet recorded) must not read the catalog's rows, which may not be counted yet."""
    backend = pg.PostgresBackend(fresh_postgres_url)
    backend.migrate()
    backend.set_many([Row(TaskScope("etl", "r", "t").namespace, "k", "1", None, 1.0, None)])
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {pg.DAG_KEYS} SET n = 0")  # as if not counted yet
        conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version = %s", (pg._FILLS_DAG_KEYS,))
    assert backend.dag_counts(["etl"], 2.0) == [1]
    backend.close()
