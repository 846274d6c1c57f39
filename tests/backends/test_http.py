"""The HTTP backend against a real `taskstate serve` subprocess on loopback.

It passes the shipped backend contract, except where the contract states a dumb store's duty
that the server takes over on purpose (the clock, the writer, expired-row cleanup): those tests
are replaced below by what the server does instead, one by one.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from tests.resumable.driver import SYSTEMS, Env, run_scenario
from tests.resumable.jobsystem import running_jobsystem
from tests.test_processes import race_compare_and_set

from taskstate import NEVER_EXPIRE, StateStore, TaskScope
from taskstate.backends.base import Entry
from taskstate.backends.http import HttpBackend
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.errors import AccessDeniedError, BackendUnavailableError, ConfigError
from taskstate.settings import Settings
from taskstate.testing.contract import NOW, NS, BackendContract

SECRET = "s" * 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`taskstate serve` in its own process, on its own SQLite file."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.db = root / "served.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/taskstate"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{self.db}", "serve",
             "--port", str(self.port), "--log-level", "warning"],
            env={**os.environ, "AIRFLOW_HOME": str(root),
                 "AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "0", **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"taskstate serve did not start:\n{self.proc.stdout}")
            time.sleep(0.1)

    def wipe(self) -> None:
        """Empty the served file between tests (straight through SQLite, not the API)."""
        direct = SQLiteBackend(f"sqlite:///{self.db}")
        for kind in ("a", "m", "t"):
            direct.clear_prefix(kind)
        direct.close()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    served = Server(tmp_path_factory.mktemp("served"))
    yield served
    served.stop()


@pytest.fixture
def served(server: Server) -> Server:
    server.wipe()
    return server


class TestHttpContract(BackendContract):
    @pytest.fixture
    def backend(self, served: Server) -> Iterator[HttpBackend]:
        backend = HttpBackend(served.url, token="")
        yield backend
        backend.close()

    # -- the server's clock: expiry is the caller's retention from the server's now --------

    def test_set_then_get_round_trips_text_and_expiry(self, backend: HttpBackend) -> None:  # type: ignore[override]
        backend.set(NS, "k", '{"a":[1,2]}', NOW + 5.5, NOW)
        entry = backend.get(NS, "k")
        assert entry is not None and entry.value == '{"a":[1,2]}'
        assert entry.expires_at == pytest.approx(time.time() + 5.5, abs=1.5)
        backend.set(NS, "never", "1", None, NOW)
        assert backend.get(NS, "never") == Entry("1", None)

    def test_set_overwrites(self, backend: HttpBackend) -> None:  # type: ignore[override]
        backend.set(NS, "k", "1", NOW + 60, NOW)
        backend.set(NS, "k", "2", None, NOW + 1)
        got = backend.get(NS, "k")
        assert got is not None and (got.value, got.expires_at) == ("2", None)
        (row,) = backend.scan(NS)
        assert row.updated_at == pytest.approx(time.time(), abs=5)  # the server's clock

    def test_transact_writing_nothing_leaves_the_row(self, backend: HttpBackend) -> None:  # type: ignore[override]
        backend.set(NS, "k", "1", NOW + 60, NOW)
        before = backend.get(NS, "k")
        assert backend.transact(NS, "k", lambda e: (None, e), NOW) == before
        assert backend.get(NS, "k") == before
        assert backend.transact(NS, "absent", lambda e: (None, "r"), NOW) == "r"
        assert backend.get(NS, "absent") is None

    def test_expired_rows_are_counted_and_deleted_in_batches(self, backend: HttpBackend) -> None:  # type: ignore[override]
        """Replaced: an expired key is absent at once; the server's own store deletes it."""
        backend.set(NS, "old", "1", NOW - 1, NOW)
        backend.set(NS, "fresh", "1", NOW + 100, NOW)
        assert backend.get(NS, "old") is None
        assert [r.key for r in backend.scan(NS)] == ["fresh"]
        assert backend.count_expired(NOW) == backend.delete_expired(NOW, 0) == 0

    def test_delete_expired_unbatched_is_one_bounded_statement(self, backend: HttpBackend) -> None:  # type: ignore[override]
        """Replaced: cleanup runs where the rows are (`taskstate cleanup` on the server)."""
        assert backend.delete_expired(NOW, 0) == 0

    # -- the writer comes from the credentials, not from the caller ------------------------

    def test_the_writer_is_stored_with_each_write(  # type: ignore[override]
        self, backend: HttpBackend, served: Server
    ) -> None:
        backend.set(NS, "k", "1", None, NOW, '{"kind":"task"}')
        assert backend.get(NS, "k") == Entry("1", None)  # not reported back
        stored = SQLiteBackend(f"sqlite:///{served.db}").get(NS, "k")
        assert stored is not None and '"kind":"api"' in str(stored.updated_by)


def test_a_store_over_http_behaves_like_a_local_one(served: Server) -> None:
    with StateStore(served.url, settings=Settings()) as store:
        state = store.task_state(TaskScope("d", "r", "t", 3))
        state.set("cursor", {"page": 1})
        state.set("forever", 1, retention=NEVER_EXPIRE)
        state.set("brief", 1, retention=timedelta(seconds=1))
        assert state.update("n", lambda v: v + 1, default=0) == 1
        assert state.compare_and_set("n", 1, 5) and not state.compare_and_set("n", 1, 6)
        assert state.get("cursor") == {"page": 1} and state.get("n") == 5
        time.sleep(2.5)  # `brief` expires by the server's clock
        assert state.get("brief") is None
        assert state.keys() == ["cursor", "forever", "n"]
        assert asyncio.run(state.aget("cursor")) == {"page": 1}
        state.clear()
        assert state.items() == []


def test_concurrent_updates_from_processes_lose_nothing(served: Server) -> None:
    code = (
        "import sys\nfrom taskstate import StateStore, TaskScope\n"
        "from taskstate.settings import Settings\n"
        "s = StateStore(sys.argv[1], settings=Settings()).task_state(TaskScope('d','r','t'))\n"
        "for _ in range(25): s.update('n', lambda v: v + 1, default=0)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, served.url]) for _ in range(4)]
    assert [p.wait(120) for p in procs] == [0, 0, 0, 0]
    with StateStore(served.url, settings=Settings()) as store:
        assert store.task_state(TaskScope("d", "r", "t")).get("n") == 100


def test_compare_and_set_racing_processes_over_http_exactly_one_wins_each_round(
    served: Server,
) -> None:
    race_compare_and_set(served.url)


def test_unreachable_server_is_a_bounded_typed_error() -> None:
    backend = HttpBackend(f"http://127.0.0.1:{free_port()}/taskstate", token="", retry_window=1)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1:\d+ is unavailable"):
        backend.get(NS, "k")
    assert 0.9 < time.monotonic() - started < 5  # the whole window, and not much more


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first `failures` requests, then 404 (an absent key)."""

    failures = 2
    seen = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        self.send_response(503 if type(self).seen <= self.failures else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_503_is_retried_with_backoff_then_answered() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        backend = HttpBackend(f"http://127.0.0.1:{httpd.server_port}/taskstate", token="")
        assert backend.get(NS, "k") is None
        assert _Flaky.seen == 3
    finally:
        httpd.shutdown()


def test_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"http\(s\)://host\[:port\]/taskstate"):
        HttpBackend("http:///taskstate")


def test_pool_token_from_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(tmp_path, {"AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET})
    try:
        scope = TaskScope("pool_dag", "r", "t")
        monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_TOKEN", raising=False)
        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
        with pytest.raises(AccessDeniedError, match="401"):
            StateStore(server.url, settings=Settings()).task_state(scope).get("k")
        token = subprocess.run(
            [sys.executable, "-m", "taskstate", "token", "create", "--dag-id", "pool_*",
             "--expires-in", "never"],
            env={**os.environ, "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET},
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_TOKEN_CMD", f"echo {token}")
        with StateStore(server.url, settings=Settings()) as store:
            store.task_state(scope).set("k", 1)
            assert store.task_state(scope).get("k") == 1
            with pytest.raises(AccessDeniedError, match="403"):
                store.task_state(TaskScope("other", "r", "t")).set("k", 1)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "kill_at", ["before_submit", "after_accept", "before_persist", "during_poll"]
)
def test_resumable_job_mixin_unchanged_over_http(
    served: Server, tmp_path: Path, kill_at: str
) -> None:
    """The mixin's crash scenarios with the task state behind the HTTP API: one job each."""
    with running_jobsystem(tmp_path / "jobs.db") as jobs:
        # Jobs outlast a few HTTP round trips on a loaded machine, so a poll happens to kill.
        env = Env(state_url=served.url, jobs_path=jobs.path, run_for=1.0)
        scenario = run_scenario(env, jobs, SYSTEMS["client-token"], kill_at=kill_at)
    assert scenario.tries[0].killed_at == kill_at
    assert scenario.working_jobs == 1, scenario.jobs
    assert scenario.result_correct, scenario.final
