"""The connection budget, checked through PgBouncer (the transaction-pooling lane of the contract
and concurrency tests lives in test_postgres.py and test_processes.py).

In session pooling mode a client holds one server connection from its first query until it
disconnects, exactly as with a direct connection; with a pool of N server connections and a
short `query_wait_timeout`, a client connection beyond N waits, and PgBouncer drops it and logs
"query_wait_timeout" — even one a pool opened in the background and never used. So these tests
fail when a task process or the CLI opens a second server connection at once, or when one
store uses more than its pool of 4.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from tests.api.test_serve import _env as serve_env
from tests.api.test_serve import serving
from tests.pgbouncer_server import PgBouncer, running_pgbouncer
from tests.postgres_server import PostgresServer

from taskstate.backends.postgres import PostgresBackend, take_prepare_option
from taskstate.errors import BackendUnavailableError, ConfigError
from taskstate.testing.contract import NOW

pytestmark = pytest.mark.postgres

WAIT = 2  # seconds a client may wait for a server connection before PgBouncer drops it

# Everything a task does with its state, in one process, with a 2 s retry window so that a
# wait for a second server connection fails quickly.
TASK = """
import sys
from taskstate import AssetScope, StateStore, TaskScope
from taskstate.backends.postgres import PostgresBackend

backend = PostgresBackend(sys.argv[1], retry_window_s=2)
with StateStore(backend=backend) as store:
    task = store.task_state(TaskScope("dag", "run", "task"))
    for i in range(30):
        task.set(f"k{i}", i)
    for row in backend.scan(task.scope.namespace):  # writes while a listing is paged
        task.update(row.key, lambda v: v + 1)
    assert task.compare_and_set("k0", 1, 10)
    assert task.get("k0") == 10 and len(task.keys()) == 30 and task.entry("k1") is not None
    task.delete("k1")
    asset = store.asset_state(AssetScope(name="orders"))
    asset.set("cursor", 5)
    asset.update("cursor", lambda v: v + 1)
    task.clear()
print("ok")
"""


class Bounced(NamedTuple):
    bouncer: PgBouncer
    url: str  # a fresh, migrated database through it


@pytest.fixture
def one_connection(postgres_server: PostgresServer, fresh_postgres_url: str) -> Iterator[Bounced]:
    """PgBouncer in session mode with ONE server connection, in front of a fresh database."""
    with running_pgbouncer(
        postgres_server, pool_mode="session", pool_size=1, query_wait_timeout=WAIT
    ) as bouncer:
        url = bouncer.route(fresh_postgres_url)
        PostgresBackend(url).migrate()
        yield Bounced(bouncer, url)


def test_a_task_process_needs_one_server_connection(one_connection: Bounced) -> None:
    url = one_connection.url
    proc = subprocess.run(
        [sys.executable, "-c", TASK, url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "query_wait_timeout" not in one_connection.bouncer.log()  # no second connection, ever


def test_the_cli_needs_one_server_connection(one_connection: Bounced) -> None:
    session_url = one_connection.url
    scope = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]
    for args in (
        ["db", "migrate"],
        ["task", "set", *scope, "k", "1"],
        ["task", "list", "--dag-id", "d"],
        ["export"],
        ["clean"],
    ):
        cmd = [sys.executable, "-m", "taskstate", "--url", session_url, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (args, proc.stderr)
    assert "query_wait_timeout" not in one_connection.bouncer.log()


def test_needing_a_second_connection_at_once_would_fail_here(one_connection: Bounced) -> None:
    """The control: a process that holds its one server connection (inside `update`) while it
    asks for another does fail in this setup, so the two tests above would catch it."""
    session_url = one_connection.url
    outer = PostgresBackend(session_url)
    inner = PostgresBackend(session_url, retry_window_s=1)
    outer.set("ns", "k", "1", None, NOW)

    def nested(entry: object) -> tuple[None, None]:
        inner.get("ns", "k")  # a second server connection while the first is held
        return None, None

    with pytest.raises(BackendUnavailableError):
        outer.transact("ns", "k", nested, NOW)
    assert "query_wait_timeout" in one_connection.bouncer.log()
    outer.close()
    inner.close()


def test_one_store_uses_at_most_its_pool_of_4(
    postgres_server: PostgresServer, fresh_postgres_url: str
) -> None:
    """`taskstate serve` (and any threaded process) shares one store: 16 threads at once use at
    most 4 server connections, and wait for them rather than open more."""
    with running_pgbouncer(
        postgres_server, pool_mode="session", pool_size=4, query_wait_timeout=WAIT
    ) as bouncer:
        backend = PostgresBackend(bouncer.route(fresh_postgres_url))
        backend.migrate()
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(40):
                    backend.set("ns", f"{n}-{i}", "1", None, NOW)
                    backend.transact("ns", "shared", _increment, NOW)
            except BaseException as exc:  # the assertion below shows it
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(_ours(bouncer, "CLIENTS")) <= 4  # the store's own connections, still open
        assert backend.get("ns", "shared").value == str(16 * 40)  # type: ignore[union-attr]
        backend.close()


def test_taskstate_serve_uses_at_most_4_server_connections(
    postgres_server: PostgresServer, fresh_postgres_url: str, tmp_path: Path
) -> None:
    """16 clients at once against a real `taskstate serve` behind a session pool of 4."""
    with running_pgbouncer(
        postgres_server, pool_mode="session", pool_size=4, query_wait_timeout=WAIT
    ) as bouncer:
        url = bouncer.route(fresh_postgres_url)
        PostgresBackend(url).migrate()
        statuses: list[int] = []
        # No access log: 320 requests' lines would fill the unread stderr pipe and stall it.
        quiet = ("--log-level", "warning")
        with serving(tmp_path, serve_env(tmp_path), url, *quiet) as (base, _):
            task = f"{base}/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store"

            def client(n: int) -> None:
                with httpx.Client(timeout=60) as http:
                    for i in range(10):
                        statuses.append(http.put(f"{task}/c{n}-{i}", json={"value": i}).status_code)
                        statuses.append(http.get(f"{task}/c{n}-{i}").status_code)

            threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert sorted(set(statuses)) == [200, 204] and len(statuses) == 16 * 20
        assert "query_wait_timeout" not in bouncer.log()


def _increment(entry: object) -> tuple[object, None]:
    from taskstate.backends.base import Entry

    assert entry is None or isinstance(entry, Entry)
    value = 1 if entry is None else int(entry.value) + 1
    return Entry(str(value), None), None


def _ours(bouncer: PgBouncer, what: str) -> list[dict[str, object]]:
    """SHOW CLIENTS / SERVERS without the admin console's own connection."""
    return [row for row in bouncer.show(what) if row["database"] != "pgbouncer"]


def test_an_idle_store_holds_no_server_connection_in_transaction_mode(
    pgbouncer: PgBouncer, postgres_url: str
) -> None:
    """Behind transaction pooling, the server connection goes back to PgBouncer after each
    operation: a store that is open but idle holds none."""
    backend = PostgresBackend(pgbouncer.route(postgres_url))
    backend.migrate()
    backend.set("ns", "idle", "1", None, NOW)
    backend.transact("ns", "idle", _increment, NOW)
    assert _ours(pgbouncer, "CLIENTS")  # our pooled client connection is still open...
    assert all(not row["link"] for row in _ours(pgbouncer, "SERVERS"))  # ...linked to none
    backend.close()


_PREPARED = "SELECT count(*) > 0 FROM pg_prepared_statements"


def test_statements_are_prepared_only_where_the_session_ends_at_postgres(
    pgbouncer: PgBouncer, postgres_url: str
) -> None:
    through = pgbouncer.route(postgres_url)
    PostgresBackend(postgres_url).migrate()
    for url, prepared in (
        (postgres_url, True),  # auto, direct
        (through, False),  # auto, behind a transaction pooler
        (postgres_url + "?prepare=off", False),
        (through + "?application_name=forced&prepare=on", True),
    ):
        backend = PostgresBackend(url)
        for _ in range(5):
            backend.set("ns", "prepared", "1", None, NOW)  # (libpq never saw `prepare`)
            backend.get("ns", "prepared")
        on_server = backend._run(lambda conn: conn.execute(_PREPARED).fetchone())
        assert on_server == (prepared,), url
        backend.close()


def test_a_bad_prepare_option_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"prepare=auto .*prepare=on or prepare=off"):
        PostgresBackend("postgresql://u:hunter2@127.0.0.1:5432/db?prepare=yes")
    assert take_prepare_option("postgresql://h/db?sslmode=disable&prepare=OFF") == (
        "postgresql://h/db?sslmode=disable",
        False,
    )
