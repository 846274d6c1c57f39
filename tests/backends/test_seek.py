"""Point operations touch one row, listings and discovery seek (issue 22): the statements each
operation sends are counted through the backend (SQLite's trace callback, libpq's protocol
trace), and the plans of the listing and discovery queries are read with EXPLAIN on a store
bulk-loaded with 20,000 rows."""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from tests.expired_rows import load_rows

from taskstate import StateStore, TaskScope
from taskstate.backends import postgres as pg
from taskstate.backends import sqlite as lite
from taskstate.backends.offload import OffloadBackend
from taskstate.backends.postgres import PostgresBackend
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.discovery import KEY_COUNT_CAP
from taskstate.scope import ASSET_PREFIX, task_prefix
from taskstate.settings import Settings

NOW = 1_800_000_000.0
BIG = TaskScope("dag_007", "run_2", "task_3")  # one task instance with many keys
BIG_KEYS = 2_000


def _rows() -> Iterator[tuple[str, str, str, float | None, float]]:
    """20,000 rows: 40 DAGs x 5 runs x 10 tasks (task_9 mapped over 4 indices) x 10 keys, a
    2,000-key task instance, assets, and expired rows."""
    for d in range(40):
        for r in range(5):
            for t in range(10):
                for index in range(4) if t == 9 else (-1,):
                    ns = TaskScope(f"dag_{d:03}", f"run_{r}", f"task_{t}", index).namespace
                    expires = NOW - 1 if (d + r + t) % 7 == 0 else NOW + 86400
                    for k in range(10 if (d, r, t) != (7, 2, 3) else BIG_KEYS):
                        yield ns, f"key_{k:05}", "1", expires, NOW - 60
    for a in range(200):
        yield ASSET_PREFIX + f"asset_{a:03}", "w", "1", None, NOW - 60


def _statements(store: StateStore, trace: Callable[[Callable[[], object]], list[str]]) -> None:
    """Every point operation through the store: one statement each (atomic ones: their lock,
    read and write, in one transaction), each naming the one key."""
    state = store.task_state(BIG)
    # A first page is one query of `limit + 1` rows, whatever the scope holds: no count of its
    # 2,000 keys (the total says "more than 50"); an exact total is asked for, and costs one.
    page = state.page(limit=50)
    assert (len(page.items), page.total, page.exact) == (50, 51, False)
    for exact_total, queries in ((False, 1), (True, 2)):
        sent = trace(lambda: state.page(limit=50, exact_total=exact_total))  # noqa: B023
        assert len(sent) == queries, (exact_total, sent)
        assert ("count(" in " ".join(sent).lower()) == exact_total, sent
    assert state.page(limit=50, exact_total=True).total == BIG_KEYS
    expected = {
        "get": (lambda: state.get("key_00500"), 1),
        "entry": (lambda: state.entry("key_00500"), 1),
        "set": (lambda: state.set("key_00500", 2), 1),
        "delete": (lambda: state.delete("key_00501"), 1),
        "update": (lambda: state.update("key_00502", lambda v: (v or 0) + 1), 2),
        "compare_and_set": (lambda: state.compare_and_set("key_00503", 1, 3), 2),
    }
    for name, (operation, reads_and_writes) in expected.items():
        sent = trace(operation)
        data = [s for s in sent if s not in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT")]
        assert len(data) == reads_and_writes, (name, sent)
        assert all("key" in s for s in data), (name, sent)  # each one picks one key
    assert state.entry("key_00500").value == 2  # type: ignore[union-attr]
    state.set("key_00501", 1)  # the module's store keeps its 2,000 keys for the next test


# -- SQLite -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/state.db"
        SQLiteBackend(url).schema_status()  # creates the schema
        load_rows(url, _rows())
        yield url


# The statements of a plain write; with history (on by default) a write also appends its
# version (docs/history.md), in the same transaction.
_NO_HISTORY = dataclasses.replace(Settings(), history_versions=0)


def test_sqlite_point_operations_send_one_statement_for_one_key(sqlite_url: str) -> None:
    with StateStore(sqlite_url, settings=_NO_HISTORY, clock=lambda: NOW) as store:
        conn = store.backend._conn()  # type: ignore[attr-defined]

        def trace(operation: Callable[[], object]) -> list[str]:
            sent: list[str] = []
            conn.set_trace_callback(sent.append)
            try:
                operation()
            finally:
                conn.set_trace_callback(None)
            return sent

        _statements(store, trace)


def _vm_steps(store: StateStore, operation: Callable[[], object]) -> int:
    """How many SQLite VM instructions (in tens) `operation` runs: its cost, not its time."""
    conn = store.backend._conn()  # type: ignore[attr-defined]
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    conn.set_progress_handler(tick, 10)
    try:
        operation()
    finally:
        conn.set_progress_handler(None, 0)
    return ticks[0]


def test_sqlite_first_page_costs_the_page_not_the_scope(sqlite_url: str) -> None:
    """Complexity, not speed: the SQLite VM instructions a first page runs (counted with a
    progress handler) are about the same for the 2,000-key task instance as for a 10-key one."""
    with StateStore(sqlite_url, settings=_NO_HISTORY, clock=lambda: NOW) as store:

        def steps(scope: TaskScope, **page: Any) -> int:
            return _vm_steps(store, lambda: store.task_state(scope).page(limit=10, **page))

        small = steps(TaskScope("dag_007", "run_2", "task_4"))  # 10 keys
        assert steps(BIG) <= 2 * small
        assert steps(BIG, exact_total=True) > 10 * small  # the control: counting is O(keys)


def test_clearing_a_map_index_with_offloading_reads_only_its_own_rows(tmp_path: Any) -> None:
    """The references to discard are read from the namespace itself (one index range), not
    from every namespace it prefixes: map index 1 never reads map index 10's rows."""
    worker = OffloadBackend(f"file://{tmp_path}/objects", keep_versions_s=0)
    url = f"sqlite:///{tmp_path}/state.db"
    with StateStore(url, settings=_NO_HISTORY, worker_backend=worker, clock=lambda: NOW) as store:
        for index in (1, 10, 11):
            store.task_state(TaskScope("dag", "run", "task", index)).set("k", {"index": index})
        objects = {p.name for p in (tmp_path / "objects").rglob("*") if p.is_file()}
        conn = store.backend._conn()  # type: ignore[attr-defined]
        sent: list[str] = []
        conn.set_trace_callback(sent.append)
        try:
            store.task_state(TaskScope("dag", "run", "task", 1)).clear()
        finally:
            conn.set_trace_callback(None)
        reads = [s for s in sent if s.lstrip().upper().startswith("SELECT")]
        assert len(reads) == 1 and "namespace = " in reads[0] and "namespace >=" not in reads[0]
        left = {p.name for p in (tmp_path / "objects").rglob("*") if p.is_file()}
        assert len(objects) == 3 and len(left) == 2 and left < objects  # index 1's went
        assert store.task_state(TaskScope("dag", "run", "task", 10)).get("k") == {"index": 10}


def _sqlite_plan(conn: Any, sql: str, params: dict[str, Any]) -> str:
    return "\n".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_sqlite_listings_and_discovery_seek_the_primary_key(sqlite_url: str) -> None:
    backend = SQLiteBackend(sqlite_url)
    conn = backend._conn()
    ns = BIG.namespace
    dag = task_prefix("dag_007")
    for sql, params in [
        (lite._GET, {}),
        (lite._ROWS, {"ns": ns, "lo": "", "now": NOW, "limit": 50, "offset": 0}),
        (lite._COUNT_IN, {"ns": ns, "lo": "", "now": NOW, "cap": -1}),
        (lite._COUNT_RANGE, {"lo": dag, "hi": dag[:-1] + " ", "now": NOW, "cap": 10001}),
        (lite._GROUPS[False], {"lo": "t\x1f", "hi": "t ", "now": NOW, "n": 2}),
        (lite._GROUPS[True], {"lo": dag, "hi": dag[:-1] + " ", "now": NOW, "n": len(dag)}),
    ]:
        plan = _sqlite_plan(conn, sql, params if params else ("ns", "k"))  # type: ignore[arg-type]
        tables = re.findall(rf"(SCAN|SEARCH) {lite.TABLE}\b(.*)", plan)
        assert tables and all(kind == "SEARCH" and "PRIMARY KEY" in how for kind, how in tables), (
            sql,
            plan,
        )
    # ...and they answer: the first page of the 2,000-key task instance, discovery's levels.
    assert len(backend.rows(ns, NOW, limit=50)) == 50
    assert backend.count(ns, NOW, exact=True) == BIG_KEYS
    assert len(backend.groups("t\x1f", NOW)) == 40
    backend.close()


def test_discovery_finds_only_what_its_page_needs(sqlite_url: str) -> None:
    """A first page of DAGs seeks `limit + 1` of the 40 DAGs (the one past the page says more
    follow): fewer VM steps than finding all of them; the total is then a lower bound."""
    with StateStore(sqlite_url, settings=_NO_HISTORY, clock=lambda: NOW) as store:
        found = store.discovery()
        first = found.dags(limit=5)  # (dag_000 to dag_039: `_rows`)
        assert ([d for d, _ in first.items], first.total, first.exact) == (
            ["dag_000", "dag_001", "dag_002", "dag_003", "dag_004"],
            6,
            False,
        )
        last = found.dags(limit=10, offset=35)
        assert (len(last.items), last.total, last.exact) == (5, 40, True)
        assert (found.dags(limit=0).total, found.assets(limit=0).total) == (40, 200)
        assert (found.assets(limit=3).total, found.runs("dag_001", limit=3).total) == (4, 4)

        def steps(limit: int) -> int:
            return _vm_steps(store, lambda: store.backend.groups("t\x1f", NOW, limit=limit))

        assert 4 * steps(4) < steps(-1)  # the skip scan stops: 4 seeks, not 40


def test_discovery_counts_stop_past_10000_keys(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).schema_status()  # creates the schema
    ns = TaskScope("dag", "run", "task").namespace
    load_rows(url, ((ns, f"k{i:05}", "1", None, NOW) for i in range(KEY_COUNT_CAP + 50)))
    with StateStore(url, settings=Settings(), clock=lambda: NOW) as store:
        found = store.discovery()
        assert found.dags().items == [("dag", KEY_COUNT_CAP + 1)]
        assert found.task_instances("dag", "run").items == [("task", -1, KEY_COUNT_CAP + 1)]
        # A listing's own total is exact when asked for.
        state = store.task_state(TaskScope("dag", "run", "task"))
        assert state.page(exact_total=True).total == 10_050


# -- PostgreSQL -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres_store_url(postgres_url: str) -> Iterator[str]:
    name = "seek_bulk"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    PostgresBackend(url).migrate()
    load_rows(url, _rows())
    yield url
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.postgres
def test_postgres_point_operations_send_one_statement_for_one_key(
    postgres_store_url: str,
) -> None:
    backend = PostgresBackend(postgres_store_url, pool_size=1)  # every call on one connection
    with StateStore(settings=_NO_HISTORY, backend=backend, clock=lambda: NOW) as store:
        pool = backend._pool()
        parsed: dict[str, str] = {}  # prepared statements outlive one trace

        def trace(operation: Callable[[], object]) -> list[str]:
            with tempfile.TemporaryFile() as log:
                conn = pool.getconn()
                conn.pgconn.trace(log.fileno())
                conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
                pool.putconn(conn)
                try:
                    operation()
                finally:
                    conn = pool.getconn()
                    conn.pgconn.untrace()
                    pool.putconn(conn)
                log.seek(0)
                return _sent(log.read().decode("utf-8", "replace"), parsed)

        _statements(store, trace)
        # Reads and deletes of namespace ranges (on `_live` and `_live_long`) turn JIT off for
        # their own transaction: the planner prices them past `jit_above_cost` at 10 M rows.
        for operation in (
            lambda: backend.groups("t\x1f", NOW, limit=5),
            lambda: list(backend.scan(task_prefix("dag_001"))),
            lambda: backend.task_versions(BIG.namespace, NOW),
            lambda: backend.clear_prefix(task_prefix("no_such_dag")),  # (deletes nothing)
        ):
            sent = [" ".join(q.split()) for q in trace(operation)]
            at = sent.index("SET LOCAL jit = off")
            assert sent[at - 1] == "BEGIN" and "COMMIT" in sent[at + 2 :], sent


def _sent(trace: str, texts: dict[str, str]) -> list[str]:
    """The statements in a libpq trace: each simple Query's text, and each extended-protocol
    Execute as the text of the statement its Bind named (parsed maybe in an earlier trace:
    `texts` keeps them)."""
    sent: list[str] = []
    bound = ""
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 4 or fields[0] != "F":
            continue
        message, rest = fields[2], fields[3]
        if message == "Query":
            sent.append(rest.strip().strip('"'))
        elif message == "Parse":
            name, _, text = rest.strip().partition(" ")
            texts[name.strip('"')] = text
        elif message == "Bind":
            bound = rest.strip().split(" ")[1].strip('"')
        elif message == "Execute":
            sent.append(texts.get(bound, "?"))
    return sent


def _pg_plan(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> list[str]:
    """Every plan node as "<node type> <relation> <index>"."""
    (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()  # type: ignore[misc]
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(
            f"{node['Node Type']} {node.get('Relation Name', '')} {node.get('Index Name', '')}"
        )
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    return nodes


_INDEX_ONLY_LIVE = f"{pg.TABLE}_live"
_BOTH_LIVE = f"{pg.TABLE}_live(_long)?"  # both (not necessarily index-only)


@pytest.mark.postgres
def test_postgres_listings_and_discovery_seek_their_index(postgres_store_url: str) -> None:
    ns, dag = BIG.namespace, task_prefix("dag_007")
    live = {"now": NOW}
    in_ns = {"ns": ns, "lo": "", "hi": None, **live}
    dag_range = {"lo": dag, "hi": dag[:-1] + " ", **live}
    with psycopg.connect(postgres_store_url, autocommit=True) as conn:
        for sql, params, index in [
            (pg._ROWS, {**in_ns, "limit": 50, "offset": 0}, f"{pg.TABLE}_keys"),
            # Both lead with the namespace's hash: either is a range of one namespace.
            (pg._COUNT_IN, {**in_ns, "cap": 10001}, f"{pg.TABLE}_(keys|pkey)"),
            # Range counts read the index alone (expiry included): the table is not visited.
            (pg._COUNT_RANGE, {**dag_range, "cap": 10001}, _INDEX_ONLY_LIVE),
            (
                pg._COUNT_EACH_RANGE,
                {"a": [dag], "b": [dag[:-1] + " "], "cap": 10001, **live},
                _INDEX_ONLY_LIVE,
            ),
            (
                pg._COUNT_EACH_IN,
                {"a": [ns], "b": [None], "cap": 10001, **live},
                f"{pg.TABLE}_(keys|pkey)",
            ),
            # Discovery's skip scan, keyset scans, range deletes and reads: on the two
            # namespace indexes (the short namespaces' and the long ones'), no order index.
            (
                pg._GROUPS[False],
                {"lo": "t\x1f", "hi": "t ", "n": 2, "like": "", "limit": 51, **live},
                _BOTH_LIVE,
            ),
            (
                pg._GROUPS[True],
                {**dag_range, "n": len(dag), "like": "", "limit": None},
                _BOTH_LIVE,
            ),
            (pg._SCAN_PAGE, {"ns": "", "key": "", "hi": pg._TOP, "limit": 1000}, _BOTH_LIVE),
            (
                pg._SCAN_PAGE,
                {"ns": dag, "key": "key_00003", "hi": dag[:-1] + " ", "limit": 1000},
                _BOTH_LIVE,
            ),
            (pg._CLEAR_RANGE, {"lo": dag, "hi": dag[:-1] + " "}, _BOTH_LIVE),
            (pg._TASK_KEYS, {"lo": ns, "hi": ns[:-1] + "\x20"}, _BOTH_LIVE),
        ]:
            nodes = _pg_plan(conn, sql, params)
            on_table = [n for n in nodes if f" {pg.TABLE} " in n and not n.startswith("Modify")]
            assert on_table and all(
                n.startswith(("Index Scan", "Index Only Scan", "Bitmap Heap Scan"))
                for n in on_table
            ), (sql, nodes)
            assert any(re.search(f" {index}$", n) for n in nodes), (sql, nodes)
            if index in (_INDEX_ONLY_LIVE, _BOTH_LIVE):  # the long namespaces on their own index
                assert any(n.endswith(f" {pg.TABLE}_live") for n in nodes), nodes
                assert any(n.endswith(f" {pg.TABLE}_live_long") for n in nodes), nodes
            if index == _INDEX_ONLY_LIVE:
                assert f"Index Only Scan {pg.TABLE} {pg.TABLE}_live" in nodes, nodes
        assert pg._index_state(conn, f"{pg.TABLE}_order") == "absent"
    backend = PostgresBackend(postgres_store_url)
    assert len(backend.rows(ns, NOW, limit=50)) == 50
    assert backend.count(ns, NOW, exact=True) == BIG_KEYS
    assert len(backend.groups("t\x1f", NOW)) == 40
    backend.close()


@pytest.mark.postgres
def test_an_online_index_build_that_died_is_rebuilt_by_the_next_migrate(
    fresh_postgres_url: str,
) -> None:
    backend = PostgresBackend(fresh_postgres_url)
    assert backend.migrate() == list(range(1, len(pg.MIGRATIONS) + 1))
    backend.set("ns", "k", "1", None, NOW)
    index = pg._ONLINE[4]
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        # What a CREATE INDEX CONCURRENTLY killed midway leaves: an invalid index, unrecorded.
        conn.execute(
            f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{index}'::regclass"
        )
        conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version >= 4")
        assert pg._index_state(conn, index) == "invalid"
    assert backend.migrate() == list(range(4, len(pg.MIGRATIONS) + 1))
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        assert pg._index_state(conn, index) == "valid"
    assert [r.key for r in backend.rows("ns", NOW)] == ["k"]
    backend.close()


@pytest.mark.postgres
def test_postgres_range_counts_include_namespaces_too_long_for_the_live_index(
    fresh_postgres_url: str,
) -> None:
    backend = PostgresBackend(fresh_postgres_url)
    backend.migrate()
    dag, other = task_prefix("dag_long"), task_prefix("dag_other")
    short, long_ = dag + "run\x1ftask\x1f-1", dag + "é" * 600 + "\x1ftask\x1f-1"  # 1,200 bytes
    for ns in (short, long_):
        for k in range(3):
            backend.set(ns, f"k{k}", "1", NOW + 60, NOW)
        backend.set(ns, "gone", "1", NOW - 1, NOW)  # expired: never counted
    backend.set(other + "run\x1ftask\x1f-1", "k", "1", None, NOW)
    assert backend.count(dag, NOW) == 6
    assert backend.counts([dag, other], NOW) == [6, 1]
    assert backend.counts([dag, other], NOW, cap=4) == [4, 1]  # the two parts' sum is capped
    assert backend.count(dag, NOW, cap=5) == 5
    assert backend.count(long_, NOW) == 3
    backend.close()


@pytest.mark.postgres
def test_postgres_drops_the_order_index_online_and_ranges_read_the_namespace_indexes(
    fresh_postgres_url: str,
) -> None:
    """The step that drops the state table's order index, on a store the previous schema wrote
    (index there, short and long namespaces): afterwards scans, discovery, range clears and
    history's key listing find every row, in order, through `_live` and `_live_long`."""
    backend = PostgresBackend(fresh_postgres_url)
    backend.migrate()
    dag, other = task_prefix("dag_a"), task_prefix("dag_b")
    long_ = dag + "é" * 600 + "\x1ftask\x1f-1"  # 1,200 bytes: on `_live_long` only
    sibling = dag + "é" * 600 + "\x1fother\x1f-1"  # the same first 200 characters
    short = [dag + "run\x1ftask\x1f-1", other + "run\x1ftask\x1f-1", ASSET_PREFIX + "x"]
    for ns in (*short, long_):
        for k in ("k1", "k0"):
            backend.set(ns, k, "1", NOW + 60, NOW)
    backend.set(sibling, "k0", "1", None, NOW)
    backend.set(long_, "gone", "1", NOW - 1, NOW)  # expired: scanned, never discovered
    index = f"{pg.TABLE}_order"
    step = next(v for v, name in pg._ONLINE.items() if name == index)  # its number may change
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX {index} ON {pg.TABLE} ((left(namespace, 200)))")
        conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version >= %s", (step,))
    assert backend.schema_status().current == step - 1
    assert backend.migrate() == list(range(step, len(pg.MIGRATIONS) + 1))
    with psycopg.connect(fresh_postgres_url) as conn:
        assert pg._index_state(conn, index) == "absent"
    everything = sorted(
        [(ns, k) for ns in (*short, long_) for k in ("k0", "k1")]
        + [(long_, "gone"), (sibling, "k0")]
    )
    assert [(r.namespace, r.key) for r in backend.scan()] == everything
    assert [(r.namespace, r.key) for r in backend.scan(dag)] == [
        r for r in everything if r[0].startswith(dag)
    ]
    assert backend.groups("t\x1f", NOW) == ["dag_a", "dag_b"]
    assert backend.groups(dag, NOW) == ["run", "é" * 600]  # byte order: "r" < "é"
    assert backend.groups(dag, NOW, whole=True) == [
        "run\x1ftask\x1f-1",
        "é" * 600 + "\x1fother\x1f-1",
        "é" * 600 + "\x1ftask\x1f-1",
    ]
    assert [k for _, k, _ in backend.task_versions(long_, NOW)] == ["gone", "k0", "k1"]
    assert backend.clear_prefix(dag) == 6
    assert [r.namespace for r in backend.scan()] == sorted([ASSET_PREFIX + "x", short[1]] * 2)
    backend.close()


@pytest.mark.postgres
def test_postgres_state_table_is_vacuumed_at_2_percent_churn(fresh_postgres_url: str) -> None:
    """Index-only counts need all-visible pages: the table's own autovacuum settings (online,
    in a migration step) vacuum it ten times as often as PostgreSQL's defaults."""
    backend = PostgresBackend(fresh_postgres_url)
    backend.migrate()
    backend.close()
    with psycopg.connect(fresh_postgres_url) as conn:
        (options,) = conn.execute(  # type: ignore[misc]
            "SELECT reloptions FROM pg_class WHERE relname = %s", (pg.TABLE,)
        ).fetchone()
    assert set(options) >= {
        "autovacuum_vacuum_scale_factor=0.02",
        "autovacuum_analyze_scale_factor=0.02",
        "autovacuum_vacuum_insert_scale_factor=0.02",
    }
