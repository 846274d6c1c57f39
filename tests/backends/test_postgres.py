from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from tests import spawned
from tests.cli import invoke
from tests.commit_proxy import commit_proxy
from tests.pgbouncer_server import running_pgbouncer
from tests.postgres_server import PostgresServer, free_port, running_server
from tests.test_scope import any_text, round_trip_or_typed_error

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.backends import open_backend
from taskstate.backends.base import Entry, Row, SchemaStatus
from taskstate.backends.postgres import MIGRATIONS, PostgresBackend, _transient_connect
from taskstate.errors import (
    BackendError,
    BackendUnavailableError,
    OutcomeUnknownError,
    SchemaMissingError,
)
from taskstate.settings import Settings
from taskstate.testing.contract import NOW, BackendContract, untimed

pytestmark = pytest.mark.postgres


@pytest.fixture
def backend_url(postgres_url: str) -> Iterator[PostgresBackend]:
    """A migrated, empty backend on the session's server."""
    backend = PostgresBackend(postgres_url)
    backend.migrate()
    backend.clear_prefix("")
    yield backend
    backend.close()


@pytest.fixture
def lane_backend(postgres_url: str, pg_route: Callable[[str], str]) -> Iterator[PostgresBackend]:
    """The same, directly and through PgBouncer in transaction pooling mode."""
    backend = PostgresBackend(pg_route(postgres_url))
    backend.migrate()
    backend.clear_prefix("")
    yield backend
    backend.close()


class TestPostgresContract(BackendContract):
    @pytest.fixture
    def backend(self, lane_backend: PostgresBackend) -> PostgresBackend:
        return lane_backend


def test_reads_and_writes_before_migrate_say_to_run_db_migrate(fresh_postgres_url: str) -> None:
    backend = PostgresBackend(fresh_postgres_url)
    assert backend.schema_status() == SchemaStatus(None, len(MIGRATIONS))
    with pytest.raises(SchemaMissingError, match="taskstate db migrate"):
        backend.set("ns", "k", "1", None, NOW)
    with pytest.raises(SchemaMissingError, match="taskstate db migrate"):
        backend.get("ns", "k")
    assert backend.migrate() == list(range(1, len(MIGRATIONS) + 1))
    backend.set("ns", "k", "1", None, NOW)
    assert untimed(backend.get("ns", "k")) == Entry("1", None)
    assert backend.schema_status().up_to_date
    backend.close()


def test_tables_are_prefixed_and_never_airflows(fresh_postgres_url: str) -> None:
    PostgresBackend(fresh_postgres_url).migrate()
    with psycopg.connect(fresh_postgres_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables").fetchall()}
    ours = {t for t in tables if not t.startswith(("pg_", "sql_"))}
    assert ours == {
        "taskstate_entries",
        "taskstate_schema_version",
        "taskstate_versions",
        "taskstate_version_marks",
        "taskstate_write_ids",
        "taskstate_dag_keys",
    }


def test_concurrent_migrations_apply_each_version_once(
    fresh_postgres_url: str, pg_route: Callable[[str], str]
) -> None:
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.map(spawned.migrate, [pg_route(fresh_postgres_url)] * 4)
    # Each version once, by whichever migrator got there (an online index build runs between
    # transactions, so another migrator may record the version after it).
    assert sorted(v for applied in results for v in applied) == list(range(1, len(MIGRATIONS) + 1))


def test_sqlalchemy_urls_work_and_the_password_never_shows(postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    backend = open_backend(url, Settings())
    assert isinstance(backend, PostgresBackend)
    backend.migrate()
    backend.set("ns", "k", "1", None, NOW)
    assert untimed(backend.get("ns", "k")) == Entry("1", None)
    for shown in (backend.url, backend.describe(), repr(StateStore(backend=backend))):
        assert "secret" not in shown
    assert backend.describe().endswith(f"127.0.0.1:{urlsplit(postgres_url).port}/taskstate")
    backend.close()


def test_unreachable_server_is_a_typed_error_naming_it() -> None:
    port = free_port()
    backend = PostgresBackend(
        f"postgresql://u:hunter2@127.0.0.1:{port}/db", retry_window_s=0.5, connect_timeout_s=1
    )
    with pytest.raises(BackendUnavailableError, match=f"127.0.0.1:{port}/db") as caught:
        backend.set("ns", "k", "1", None, NOW)
    assert isinstance(caught.value, ConnectionError)
    assert "hunter2" not in str(caught.value)


def test_wrong_password_fails_at_once_without_retrying(postgres_url: str) -> None:
    backend = PostgresBackend(postgres_url.replace(":secret@", ":wrong@"), retry_window_s=60)
    with pytest.raises(BackendError, match="password authentication failed") as caught:
        backend.get("ns", "k")
    assert not isinstance(caught.value, BackendUnavailableError)


def test_transact_retries_when_the_connection_dies_before_commit(
    lane_backend: PostgresBackend, postgres_url: str
) -> None:
    backend = lane_backend
    calls = []

    def incr(entry: Entry | None) -> tuple[Entry | None, int]:
        calls.append(entry)
        if len(calls) == 1:  # kill our own session mid-transaction, from outside
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'taskstate' AND state = 'idle in transaction'"
                )
        value = 1 if entry is None else int(entry.value) + 1
        return Entry(str(value), None), value

    backend.set("ns", "n", "41", None, NOW)
    assert backend.transact("ns", "n", incr, NOW) == 42
    assert len(calls) == 2
    assert untimed(backend.get("ns", "n")) == Entry("42", None)


def test_update_from_8_processes_loses_nothing(lane_backend: PostgresBackend) -> None:
    url = lane_backend._conninfo
    with mp.get_context("spawn").Pool(8) as pool:
        pool.starmap(spawned.increment, [(url, 500)] * 8)
    with StateStore(url) as store:
        assert store.task_state(TaskScope("dag", "run", "task")).get("counter") == 4000


def _fork_child(backend: PostgresBackend, conn: Connection) -> None:
    backend.set("ns", "child", "1", None, NOW)
    conn.send(backend.get("ns", "parent"))


def test_a_forked_child_opens_its_own_pool(backend_url: PostgresBackend) -> None:
    backend = backend_url
    backend.set("ns", "parent", "1", None, NOW)
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=_fork_child, args=(backend, child_end))
    child.start()
    assert untimed(parent_end.recv()) == Entry("1", None)
    child.join()
    assert child.exitcode == 0
    # the parent's pooled sessions survived the child's exit
    assert untimed(backend.get("ns", "child")) == Entry("1", None)
    backend.set("ns", "parent", "2", None, NOW)
    assert untimed(backend.get("ns", "parent")) == Entry("2", None)


def _wait_for_more_acks(path: Path, than: int, limit: float = 90.0) -> int:
    """Wait for 50 more acknowledged writes; a writer that died or hung fails the test, well
    inside the retry window plus an outage (30 s + a few seconds), not at pytest's timeout."""
    end = time.monotonic() + limit
    while (count := len(path.read_text().split())) <= than + 50:
        assert time.monotonic() < end, f"writer stuck at {count} acks for {limit:.0f}s"
        time.sleep(0.05)
    return count


@pytest.mark.slow
def test_every_acknowledged_write_survives_server_restarts_and_crashes(
    backend_url: PostgresBackend, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url, acks = postgres_server.url, tmp_path / "acks"
    acks.touch()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    writer = ctx.Process(target=spawned.write_forever, args=(url, str(acks), stop))
    writer.start()
    try:
        seen = _wait_for_more_acks(acks, 0)
        for outage in (postgres_server.restart, postgres_server.crash) * 2:
            outage()
            seen = _wait_for_more_acks(acks, seen)  # the writer rode through the outage
    finally:
        stop.set()
        writer.join(60)
    assert writer.exitcode == 0
    acked = [int(line) for line in acks.read_text().split()]
    assert acked == list(range(len(acked)))
    with StateStore(url) as store:
        accessor = store.task_state(TaskScope("dag", "run", "writer"))
        assert all(accessor.get(f"k{i}") == {"i": i, "pad": "x" * 100} for i in acked)


@pytest.mark.slow
def test_a_write_rides_out_a_10_s_outage_within_the_default_30_s_window() -> None:
    """The server goes down for 10 s; a `set` issued meanwhile waits and then succeeds."""
    # Its own server: the session's stays up for the other tests.
    with running_server() as server, StateStore(server.url) as store:
        store.backend.migrate()
        acc = store.task_state(TaskScope("dag", "run", "outage"))
        acc.set("k", 1)
        server.halt()
        outcome: dict[str, object] = {}

        def write() -> None:
            started = time.monotonic()
            try:
                acc.set("k", 2)
            except Exception as exc:  # the assertion below names it
                outcome["error"] = exc
            outcome["waited"] = time.monotonic() - started

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(10)
        assert writer.is_alive(), outcome  # still retrying, not failed
        server.resume()
        writer.join(30)
        assert "error" not in outcome, outcome
        assert 9 < outcome["waited"] < 30, outcome  # type: ignore[operator]
        assert acc.get("k") == 2


def test_scan_pages_through_more_rows_than_one_page(backend_url: PostgresBackend) -> None:
    backend = backend_url
    expected = [(f"dag/{n}", f"k{i:04d}") for n in ("a", "b") for i in range(1200)]
    with psycopg.connect(backend._conninfo) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO taskstate_entries VALUES (%s, %s, '1', NULL, 0)", [*expected, ("e", "k")]
        )
    assert [(r.namespace, r.key) for r in backend.scan("dag/")] == expected
    assert len(list(backend.scan())) == 2401


def _die_in_commit(url: str, *, times: str, after: str = "UPDATE") -> None:
    """A deferred trigger runs inside COMMIT: it kills its own session right there, so the
    server rolls the transaction back and the client loses its connection mid-COMMIT."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE SEQUENCE commits")
        admin.execute(
            "CREATE FUNCTION die_in_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF nextval('commits') <= {times} THEN "
            "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); END IF; "
            "RETURN NULL; END $$"
        )
        admin.execute(
            f"CREATE CONSTRAINT TRIGGER die_in_commit AFTER {after} ON taskstate_entries "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die_in_commit()"
        )


class Increments:
    """`update`'s function, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, entry: Entry | None) -> tuple[Entry | None, int]:
        self.calls += 1
        value = 1 if entry is None else int(entry.value) + 1
        return Entry(str(value), None), value


def test_an_update_whose_commit_aborted_with_the_connection_is_run_again(
    fresh_postgres_url: str,
) -> None:
    backend = PostgresBackend(fresh_postgres_url)
    backend.migrate()
    backend.set("ns", "n", "41", None, NOW)
    _die_in_commit(fresh_postgres_url, times="1")
    incr = Increments()
    assert backend.transact("ns", "n", incr, NOW) == 42
    assert incr.calls == 2  # run again only because the server said the first one aborted
    assert untimed(backend.get("ns", "n")) == Entry("42", None)
    backend.close()


def test_an_update_whose_commits_keep_aborting_gives_up_applying_nothing(
    fresh_postgres_url: str,
) -> None:
    backend = PostgresBackend(fresh_postgres_url, retry_window_s=0.5)
    backend.migrate()
    backend.set("ns", "n", "41", None, NOW)
    _die_in_commit(fresh_postgres_url, times="1000")
    with pytest.raises(BackendUnavailableError, match="none of them was applied"):
        backend.transact("ns", "n", Increments(), NOW)
    assert untimed(backend.get("ns", "n")) == Entry("41", None)
    backend.close()


def test_an_update_whose_commit_answer_was_lost_is_not_run_again(
    fresh_postgres_url: str, postgres_server: PostgresServer
) -> None:
    """The COMMIT lands and its answer is lost on the way back: `fn` ran once and its result is
    returned, found out by asking the server about the transaction afterwards."""
    with commit_proxy(postgres_server.port) as proxy:
        backend = PostgresBackend(proxy.url(fresh_postgres_url))
        backend.migrate()
        backend.set("ns", "n", "41", None, NOW)
        proxy.lose_next_commit()
        incr = Increments()
        assert backend.transact("ns", "n", incr, NOW) == 42
        assert proxy.lost.is_set()
        assert incr.calls == 1
        assert untimed(backend.get("ns", "n")) == Entry("42", None)
        backend.close()


def test_an_update_whose_outcome_cannot_be_learned_raises_outcome_unknown(
    fresh_postgres_url: str, postgres_server: PostgresServer
) -> None:
    with commit_proxy(postgres_server.port) as proxy:
        backend = PostgresBackend(
            proxy.url(fresh_postgres_url), retry_window_s=0.5, connect_timeout_s=1
        )
        backend.migrate()
        backend.set("ns", "n", "41", None, NOW)
        proxy.lose_next_commit(refuse_after=True)  # and the server cannot be asked
        incr = Increments()
        with pytest.raises(OutcomeUnknownError, match="Read the state") as caught:
            backend.transact("ns", "n", incr, NOW)
        assert isinstance(caught.value, BackendUnavailableError)
        assert incr.calls == 1  # never applied twice
        backend.close()
    with psycopg.connect(fresh_postgres_url) as conn:  # (here it had landed)
        assert conn.execute("SELECT value FROM taskstate_entries").fetchone() == ("42",)


def _many_writes(backend: PostgresBackend) -> dict[str, Callable[[], int]]:
    """The writes that touch many rows and return how many (the same rule as `transact`)."""
    rows = [Row("ns", f"k{i}", "1", None, NOW) for i in range(3)]
    return {
        "import": lambda: backend.set_many(rows, replace=False),
        "clear": lambda: backend.clear("old"),
        "delete_expired": lambda: backend.delete_expired(NOW, 1000),
    }


def _olds(backend: PostgresBackend) -> None:
    backend.set_many([Row("old", f"k{i}", "1", NOW - 1, NOW) for i in range(3)])


@pytest.mark.parametrize("write", ["import", "clear", "delete_expired"])
def test_a_write_of_many_rows_whose_commit_answer_was_lost_counts_what_it_did(
    fresh_postgres_url: str, postgres_server: PostgresServer, write: str
) -> None:
    """Run again after a lost COMMIT, an import (`replace=False`) would create nothing and a
    clear would find nothing, and say 0: the server is asked instead, as for `transact`."""
    with commit_proxy(postgres_server.port) as proxy:
        backend = PostgresBackend(proxy.url(fresh_postgres_url))
        backend.migrate()
        _olds(backend)
        proxy.lose_next_commit()
        assert _many_writes(backend)[write]() == 3
        assert proxy.lost.is_set()
        left = {r.namespace for r in backend.scan()}
        assert left == ({"ns", "old"} if write == "import" else set())
        backend.close()


@pytest.mark.parametrize("write", ["import", "clear", "delete_expired"])
def test_a_write_of_many_rows_whose_outcome_cannot_be_learned_raises_outcome_unknown(
    fresh_postgres_url: str, postgres_server: PostgresServer, write: str
) -> None:
    with commit_proxy(postgres_server.port) as proxy:
        backend = PostgresBackend(
            proxy.url(fresh_postgres_url), retry_window_s=0.5, connect_timeout_s=1
        )
        backend.migrate()
        _olds(backend)
        proxy.lose_next_commit(refuse_after=True)
        with pytest.raises(OutcomeUnknownError, match="Read the state"):
            _many_writes(backend)[write]()
        backend.close()


def test_a_clear_whose_commit_aborted_with_the_connection_is_run_again(
    fresh_postgres_url: str,
) -> None:
    backend = PostgresBackend(fresh_postgres_url)
    backend.migrate()
    _olds(backend)
    _die_in_commit(fresh_postgres_url, times="1", after="DELETE")
    assert backend.clear("old") == 3  # the first attempt aborted: the server said so
    assert list(backend.scan()) == []
    backend.close()


def test_updates_through_pgbouncer_stay_exact_when_it_is_killed(
    postgres_server: PostgresServer, fresh_postgres_url: str, tmp_path: Path
) -> None:
    """4 processes increment one counter through PgBouncer while it is SIGKILLed (every client
    and server connection cut, mid-statement or mid-COMMIT) and restarted, twice: the counter
    ends at exactly the number of increments that returned."""
    with running_pgbouncer(postgres_server) as bouncer:
        url = bouncer.route(fresh_postgres_url)
        PostgresBackend(url).migrate()
        acks = tmp_path / "acks"
        acks.touch()
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        writers = [
            ctx.Process(target=spawned.count_up, args=(url, str(acks), stop)) for _ in range(4)
        ]
        for writer in writers:
            writer.start()
        try:
            seen = _wait_for_more_acks(acks, 0)
            for _ in range(2):
                bouncer.kill()
                bouncer.start()
                seen = _wait_for_more_acks(acks, seen)
        finally:
            stop.set()
            for writer in writers:
                writer.join(60)
        assert [w.exitcode for w in writers] == [0] * 4
        with StateStore(url) as store:
            counter = store.task_state(TaskScope("dag", "run", "counter")).get("n")
    assert counter == len(acks.read_text().split())


def test_airflows_postgres_metadata_db_is_the_default(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    postgres_url = fresh_postgres_url  # its own database: other tests write key "k" too
    conn = postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    settings = Settings.load(
        {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn, "AIRFLOW_HOME": str(tmp_path)}
    )
    with StateStore(settings=settings) as store:
        assert isinstance(store.backend, PostgresBackend)
        store.backend.migrate()
        store.task_state(TaskScope("d", "r", "t")).set("k", [1])
    with psycopg.connect(postgres_url) as pg:
        row = pg.execute("SELECT value FROM taskstate_entries WHERE key = 'k'").fetchone()
    assert row == ("[1]",)


def test_cli_db_migrate_and_check_on_postgres(
    fresh_postgres_url: str, pg_route: Callable[[str], str]
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return invoke("--url", pg_route(fresh_postgres_url), *args)  # in-process: tests/cli.py

    scope = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]
    before = run("task", "set", *scope, "k", "1")
    assert before.returncode != 0
    assert "taskstate db migrate" in before.stderr
    assert "Traceback" not in before.stderr
    assert run("db", "check").returncode == 1
    assert "applied 1" in run("db", "migrate").stdout
    assert run("db", "check").returncode == 0
    assert run("task", "set", *scope, "k", "1").returncode == 0
    assert run("task", "get", *scope, "k").stdout.strip() == "1"


def test_schema_2_keeps_version_1_rows_and_rewrites_legacy_references(
    fresh_postgres_url: str,
) -> None:
    ref = "/".join(["a" * 32, "b" * 32, "c" * 32])
    legacy = '{"__taskstate_ref__":"' + ref + '"}'
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(MIGRATIONS[0])
        conn.execute(
            "CREATE TABLE taskstate_schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO taskstate_schema_version (version) VALUES (1)")
        rows = [("ns", "ref", legacy), ("ns", "user", '{"__taskstate_ref__":"not one"}')]
        for row in rows:
            conn.execute("INSERT INTO taskstate_entries VALUES (%s, %s, %s, NULL, 1.0)", row)
    backend = PostgresBackend(fresh_postgres_url)
    assert backend.migrate() == list(range(2, len(MIGRATIONS) + 1))
    assert untimed(backend.get("ns", "ref")) == Entry("@taskstate-ref:" + ref, None, None)
    assert untimed(backend.get("ns", "user")) == Entry(
        '{"__taskstate_ref__":"not one"}', None, None
    )
    backend.close()


# -- errors: deterministic ones at once, transient ones retried ---------------------------------


def _raise_on_insert(url: str, sqlstate: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION 'planted failure' USING ERRCODE = '{sqlstate}'; END $$"
        )
        admin.execute(
            "CREATE TRIGGER fail_insert BEFORE INSERT ON taskstate_entries "
            "FOR EACH ROW EXECUTE FUNCTION fail_insert()"
        )


@pytest.mark.parametrize("sqlstate", ["54000", "22021", "42501", "XX000", "57014"])
def test_a_deterministic_server_error_fails_at_once_with_its_message(
    fresh_postgres_url: str, sqlstate: str
) -> None:
    backend = PostgresBackend(fresh_postgres_url, retry_window_s=30)
    backend.migrate()
    _raise_on_insert(fresh_postgres_url, sqlstate)
    started = time.monotonic()
    with pytest.raises(BackendError, match="planted failure") as caught:
        backend.set("ns", "k", "1", None, NOW)
    assert not isinstance(caught.value, BackendUnavailableError)
    assert time.monotonic() - started < 5  # not 30 s of retries
    backend.close()


@pytest.mark.parametrize("sqlstate", ["40001", "40P01", "53300", "57P01", "08006"])
def test_a_transient_server_error_is_retried_then_reported_as_an_outage(
    fresh_postgres_url: str, sqlstate: str
) -> None:
    backend = PostgresBackend(fresh_postgres_url, retry_window_s=0.4)
    backend.migrate()
    _raise_on_insert(fresh_postgres_url, sqlstate)
    with pytest.raises(BackendUnavailableError, match=r"attempts over .*planted failure"):
        backend.set("ns", "k", "1", None, NOW)
    backend.close()


@pytest.mark.parametrize(
    ("hostport", "reason"),
    [("127.0.0.1:99999", "invalid port"), ("127.0.0.1:port", "invalid integer value")],
)
def test_a_bad_url_fails_at_once(hostport: str, reason: str) -> None:
    backend = PostgresBackend(f"postgresql://u:hunter2@{hostport}/db", retry_window_s=30)
    started = time.monotonic()
    with pytest.raises(BackendError, match=reason) as caught:
        backend.get("ns", "k")
    assert not isinstance(caught.value, BackendUnavailableError)
    assert time.monotonic() - started < 5
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    "message",
    [
        "FATAL:  the database system is not yet accepting connections\n"
        "DETAIL:  Consistent recovery state has not been yet reached.",
        "FATAL:  the database system is starting up",
        "FATAL:  the database system is in recovery mode",
        "FATAL:  sorry, too many clients already",
        "connection failed: Connection refused",
        "failed to resolve host 'db': [Errno -3] Temporary failure in name resolution",
    ],
)
def test_server_answers_while_connecting_that_mean_wait(message: str) -> None:
    exc = psycopg.OperationalError(
        f'connection to server at "10.0.0.5", port 5432 failed: {message}'
    )
    assert _transient_connect(exc)


@pytest.mark.parametrize(
    "message",
    [
        'FATAL:  password authentication failed for user "u"',
        'FATAL:  database "nope" does not exist',
        "FATAL:  no pg_hba.conf entry for host",
        'connection is bad: invalid port number: "99999"',
        "failed to resolve host 'nope.invalid': [Errno -2] Name or service not known",
    ],
)
def test_server_answers_while_connecting_that_waiting_never_fixes(message: str) -> None:
    exc = psycopg.OperationalError(
        f'connection to server at "10.0.0.5", port 5432 failed: {message}'
    )
    assert not _transient_connect(exc)


def test_dropping_a_store_without_close_is_quiet(
    postgres_url: str, backend_url: PostgresBackend
) -> None:
    """The pool's own finaliser could run in its worker thread and try to join itself."""
    script = (
        "import sys, threading, gc\n"
        "from taskstate import StateStore, TaskScope\n"
        "for _ in range(40):\n"
        "    StateStore(sys.argv[1]).task_state(TaskScope('d', 'r', 't')).get('k')\n"
        "gc.collect()\n"
        "print(threading.active_count())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, postgres_url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert proc.stdout.strip() == "1"  # no pool worker left behind


# -- names every backend must store ---------------------------------------------------------------


def test_the_longest_names_airflow_allows_are_stored(backend_url: PostgresBackend) -> None:
    """4-byte characters at every bound: far beyond a b-tree entry, which once failed 54000."""
    wide = "𝔸"
    with StateStore(backend=backend_url, settings=Settings()) as store:
        task = store.task_state(TaskScope(wide * 250, wide * 250, wide * 250, 7))
        asset = store.asset_state(AssetScope(name=wide * 1500, uri="s3://" + wide * 1495))
        for accessor in (task, asset):
            accessor.set(wide * 512, 1)
            assert accessor.update(wide * 512, lambda v: v + 1) == 2
            assert accessor.keys() == [wide * 512]
            accessor.delete(wide * 512)
            assert accessor.get(wide * 512) is None
        asset.set("k", 1)
        assert [r.key for r in backend_url.scan(asset.scope.namespace)] == ["k"]
        assert backend_url.clear_prefix(asset.scope.namespace) == 1


def test_rows_written_before_the_hash_index_stay_readable_and_deletable(
    fresh_postgres_url: str,
) -> None:
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE taskstate_schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in (1, 2):  # the schema as taskstate 2 left it
            conn.execute(MIGRATIONS[version - 1])
            conn.execute("INSERT INTO taskstate_schema_version (version) VALUES (%s)", (version,))
        rows = [
            (TaskScope("d" * 300, "r", "t").namespace, "k"),
            (AssetScope(name="a").namespace, "k"),
        ]
        for namespace, key in rows:
            conn.execute(
                "INSERT INTO taskstate_entries (namespace, key, value, updated_at) "
                "VALUES (%s, %s, '1', 0)",
                (namespace, key),
            )
    backend = PostgresBackend(fresh_postgres_url)
    assert backend.migrate() == list(range(3, len(MIGRATIONS) + 1))
    assert [(r.namespace, r.key) for r in backend.scan()] == sorted(rows)
    for namespace, key in rows:
        assert untimed(backend.get(namespace, key)) == Entry("1", None)
        backend.set(namespace, key, "2", None, NOW)  # an upsert finds the old row
        assert untimed(backend.get(namespace, key)) == Entry("2", None)
        backend.delete(namespace, key)
        assert backend.get(namespace, key) is None
    backend.close()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag_id=any_text, key=any_text)
def test_any_text_is_refused_typed_or_round_trips_on_postgres(
    backend_url: PostgresBackend, dag_id: str, key: str
) -> None:
    with StateStore(backend=backend_url, settings=Settings()) as store:
        round_trip_or_typed_error(store, dag_id, key)


@pytest.mark.parametrize("versions", [20, 0])
def test_an_import_failing_at_write_time_writes_nothing(
    fresh_postgres_url: str, versions: int
) -> None:
    """All or nothing on PostgreSQL too (issue 28): row 500 of 1,000 passes every check but
    the server refuses it (a CHECK constraint this test adds); the 500 rows before it, already
    executed in the import's transaction, are rolled back with it. With history on, each row
    is its own statement (and a version); off, one executemany."""
    PostgresBackend(fresh_postgres_url).migrate()
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE taskstate_entries ADD CONSTRAINT refuse_k500 CHECK (key <> 'k500')"
        )
    with StateStore(fresh_postgres_url, settings=Settings(history_versions=versions)) as store:
        accessor = store.task_state(TaskScope("d", "r", "t"))
        accessor.set("old", 1)
        entries = [(accessor.scope, f"k{i}", i, None, None, None) for i in range(1000)]
        with pytest.raises(BackendError, match="refuse_k500"):
            store.import_entries(entries)
        assert accessor.keys() == ["old"]
        assert store.import_entries(entries[:3]) == 3  # the store still writes afterwards
        assert accessor.keys() == ["k0", "k1", "k2", "old"]
