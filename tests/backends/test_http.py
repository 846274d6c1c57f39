"""The store over HTTP (`taskstate.remote`'s accessors, `taskstate.backends.http`) against a
real `taskstate serve` subprocess on loopback, and against servers that misbehave."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from tests.api.server import running
from tests.http_proxy import running_proxy
from tests.job_services import _certificate
from tests.postgres_server import START_TIMEOUT
from tests.resumable.driver import SYSTEMS, Env, run_scenario
from tests.resumable.jobsystem import running_jobsystem
from tests.test_processes import race_compare_and_set

from taskstate import NEVER_EXPIRE, StateStore, TaskScope
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend, Request, no_proxy_covers
from taskstate.backends.offload import OffloadBackend
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.errors import (
    AccessDeniedError,
    BackendBusyError,
    BackendUnavailableError,
    ConfigError,
    InvalidKeyError,
    InvalidValueError,
    OutcomeUnknownError,
    ValueTooLargeError,
)
from taskstate.settings import Settings

SECRET = "s" * 40
T = TaskScope("dag", "run", "task")


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
        deadline = time.monotonic() + START_TIMEOUT
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


@pytest.mark.parametrize(("processes", "threads", "updates"), [(4, 1, 25), (4, 16, 30)])
def test_concurrent_updates_from_processes_lose_nothing(
    served: Server, processes: int, threads: int, updates: int
) -> None:
    # Each thread on its own connection, all on one key. 64 writers is the fleet run's hot
    # key: every lost race (412) is tried again within the retry window, so each update lands
    # exactly once and none gives up (a loop capped at 100 lost races in a row gave up a few
    # times per run at that size).
    code = (
        "import sys, threading\nfrom taskstate import StateStore, TaskScope\n"
        "from taskstate.settings import Settings\n"
        "s = StateStore(sys.argv[1], settings=Settings()).task_state(TaskScope('d','r','t'))\n"
        "errors = []\n"
        "def run():\n"
        "    try:\n"
        f"        for _ in range({updates}): s.update('n', lambda v: v + 1, default=0)\n"
        "    except Exception as exc:\n"
        "        errors.append(exc)\n"
        f"threads = [threading.Thread(target=run) for _ in range({threads})]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "sys.exit(repr(errors) if errors else 0)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, served.url]) for _ in range(processes)]
    assert [p.wait(300) for p in procs] == [0] * processes
    with StateStore(served.url, settings=Settings()) as store:
        assert store.task_state(TaskScope("d", "r", "t")).get("n") == processes * threads * updates


def test_an_update_that_loses_every_race_for_the_whole_window_is_a_busy_error(
    served: Server,
) -> None:
    # A competing writer that always wins: between this update's read and its conditional
    # write, another client changes the key, so every attempt gets 412 until the (small)
    # retry window is over.
    url = served.url
    store = StateStore(url, settings=Settings(), backend=HttpBackend(url, retry_window=0.3))
    rival = StateStore(url, settings=Settings()).task_state(TaskScope("d", "r", "t"))
    state = store.task_state(TaskScope("d", "r", "t"))
    state.set("hot", 0)
    computed = []

    def increment_while_the_rival_wins(value: int) -> int:
        computed.append(value)
        rival.set("hot", 1000 + len(computed))
        return value + 1

    with pytest.raises(BackendBusyError) as raised:
        state.update("hot", increment_while_the_rival_wins)
    message = str(raised.value)
    assert "'hot'" in message and f"{len(computed)} attempts" in message
    assert "0.3 s" in message and served.url.split("//")[1].split("/")[0] in message
    assert len(computed) > 1  # tried again after lost races, not given up at the first
    assert state.get("hot") == 1000 + len(computed)  # only the rival's writes landed
    # Uncontended, the same store updates at once.
    assert state.update("hot", lambda v: v + 1) == 1001 + len(computed)


def test_compare_and_set_racing_processes_over_http_exactly_one_wins_each_round(
    served: Server,
) -> None:
    race_compare_and_set(served.url)


def _store(url: str, **settings: object) -> StateStore:
    return StateStore(url, settings=Settings(**settings), backend=HttpBackend(url, token="t"))


def test_unreachable_server_is_a_bounded_typed_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/taskstate"
    store = StateStore(url, settings=Settings(), backend=HttpBackend(url, retry_window=1))
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1:\d+ is unavailable"):
        store.task_state(T).get("k")
    assert 0.9 < time.monotonic() - started < 5  # the whole window, and not much more


def test_a_name_that_does_not_resolve_is_not_retried() -> None:
    url = "http://taskstate.invalid/taskstate"
    store = StateStore(url, settings=Settings(), backend=HttpBackend(url, retry_window=30))
    started = time.monotonic()
    with pytest.raises(ConfigError, match="does not resolve"):
        store.task_state(T).get("k")
    assert time.monotonic() - started < 15  # no 30 s of retrying


class _Fake(http.server.BaseHTTPRequestHandler):
    """Answers from a script: `answers` (status, content type, body) in turn, the last one
    for ever after; records each request's method, path and headers."""

    answers: ClassVar[list[tuple[int, str, bytes, dict[str, str]]]] = []
    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []
    ports: ClassVar[list[int]] = []  # the client's port of each request: its connection

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append((self.command, self.path, dict(self.headers)))
        type(self).ports.append(self.client_address[1])
        answers = type(self).answers
        status, kind, body, headers = answers.pop(0) if len(answers) > 1 else answers[0]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


class _KeepAlive(_Fake):
    """HTTP/1.1: the connection stays open between requests."""

    protocol_version = "HTTP/1.1"


class _ClosesIdle(_KeepAlive):
    """HTTP/1.1 without `Connection: close`, but the connection is closed right after each
    answer: what any server does to a keep-alive connection idle past its timeout."""

    def _answer(self) -> None:
        super()._answer()
        self.close_connection = True

    do_GET = do_PUT = do_DELETE = _answer


def _serving(handler: type[_Fake]) -> Iterator[str]:
    _Fake.seen, _Fake.ports = [], []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/taskstate"
    httpd.shutdown()


@pytest.fixture
def fake() -> Iterator[str]:
    yield from _serving(_Fake)


@pytest.fixture
def keep_alive() -> Iterator[str]:
    yield from _serving(_KeepAlive)


@pytest.fixture
def closes_idle() -> Iterator[str]:
    yield from _serving(_ClosesIdle)


JSON = "application/json"
ABSENT = (404, JSON, b'{"detail":"no"}', {"X-Taskstate-Error": "KeyNotFoundError"})


NO_CONTENT = (204, JSON, b"", {})
# A conditional write: never resent once it may have reached the server.
CONDITIONAL = Request("PUT", "/x", body=b"{}", headers={"If-Match": '"e"'}, idempotent=False)


def test_one_connection_per_process_kept_alive_and_a_forked_child_opens_its_own(
    keep_alive: str,
) -> None:
    _Fake.answers = [NO_CONTENT]
    client = HttpBackend(keep_alive, token="t").http
    client.send(CONDITIONAL)
    client.send(CONDITIONAL)
    child = os.fork()
    if child == 0:  # the child: its request must not travel on the parent's socket
        try:
            client.send(CONDITIONAL)
        finally:
            os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    client.send(CONDITIONAL)
    first, second, from_child, again = _Fake.ports
    assert first == second == again  # kept alive across requests, and across the fork
    assert from_child != first


def test_a_connection_the_server_closed_while_idle_is_not_written_into(closes_idle: str) -> None:
    """A server closes an idle keep-alive connection (uvicorn after 5 s): the next request
    goes on a new connection. Written into the closed one, a conditional write would come
    back as "outcome unknown" though the server never saw it."""
    _Fake.answers = [NO_CONTENT]
    client = HttpBackend(closes_idle, token="t").http
    for _ in range(3):
        client.send(CONDITIONAL)
        time.sleep(0.2)  # the server's FIN arrives while the connection is idle
    assert len(set(_Fake.ports)) == 3


class _SlowOnSlowPath(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive: `/taskstate/slow` answers after 1 s, anything else at once; each
    answer names its path."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/taskstate/slow"):
            time.sleep(1.0)
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", JSON)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


def test_an_interrupted_exchange_leaves_no_answer_for_the_next_request() -> None:
    """Airflow's execution_timeout raises from a SIGALRM handler in the middle of whatever
    the task does: a request cut off that way must not make the next one fail as "outcome
    unknown" (nothing of it was sent), nor hand it the late answer."""

    class TimedOut(Exception):
        pass

    def alarm(signum: int, frame: object) -> None:
        raise TimedOut

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowOnSlowPath)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = HttpBackend(f"http://127.0.0.1:{httpd.server_port}/taskstate", token="t").http
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        client.send(Request("GET", "/warm"))  # the connection is open and idle
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(TimedOut):
            client.send(Request("GET", "/slow"))
        conditional = Request(
            "PUT", "/fast", body=b"{}", headers={"If-Match": '"e"'}, idempotent=False
        )
        assert client.send(conditional).json() == {"path": "/taskstate/fast"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        httpd.shutdown()


def _tls_fake(tmp_path: Path) -> tuple[http.server.ThreadingHTTPServer, str, Path]:
    """A keep-alive `_Fake` answering "absent" over TLS with a self-signed certificate for
    127.0.0.1: (the server, its store URL, the certificate)."""
    cert, key = _certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    _Fake.seen, _Fake.answers = [], [ABSENT]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"https://127.0.0.1:{httpd.server_port}/taskstate", cert


def test_tls_is_checked_against_the_systems_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An untrusted certificate is a ConfigError at once (not retried); trusted the system's
    way (SSL_CERT_FILE), the same server answers, sync and async."""
    httpd, url, cert = _tls_fake(tmp_path)  # self-signed for 127.0.0.1: in no trust store
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError, match="TLS"):
            _store(url).task_state(T).get("k")
        assert time.monotonic() - started < 10  # not the 30 s retry window
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        state = _store(url).task_state(T)
        assert state.get("k", "absent") == "absent"
        assert asyncio.run(state.aget("k", "absent")) == "absent"
        assert [method for method, _, _ in _Fake.seen] == ["GET", "GET"]
    finally:
        httpd.shutdown()


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "REQUEST_METHOD")


@pytest.fixture
def no_proxy_set(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_http_through_the_proxy_the_environment_names_unless_no_proxy(
    served: Server, no_proxy_set: pytest.MonkeyPatch
) -> None:
    """`HTTP_PROXY`: every request, sync and async, is asked of the proxy for its absolute
    URL; `NO_PROXY` naming the server's host connects directly again."""
    origin = served.url.removesuffix("/taskstate")
    with running_proxy() as proxy:
        no_proxy_set.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
        state = _store(served.url).task_state(T)
        state.set("k", {"via": "proxy"})
        assert asyncio.run(state.aget("k")) == {"via": "proxy"}
        assert state.update("k", lambda v: {**v, "n": 1}) == {"via": "proxy", "n": 1}
        assert state.get("k") == {"via": "proxy", "n": 1}
        carried = [(method, target) for method, target, _ in proxy.seen]
        key = f"{origin}/taskstate/api/v2/dags/dag/dagRuns/run/taskInstances/task/state-store/k"
        assert carried[:2] == [("PUT", f"{key}?map_index=-1"), ("GET", f"{key}?map_index=-1")]
        assert len(carried) >= 5 and all(target.startswith(origin) for _, target in carried)
        no_proxy_set.setenv("NO_PROXY", "example.com, 127.0.0.1")
        before = len(proxy.seen)
        assert _store(served.url).task_state(T).get("k") == {"via": "proxy", "n": 1}
        assert len(proxy.seen) == before
    with running_proxy(authorization="Basic bWU6eA==") as proxy:
        no_proxy_set.delenv("NO_PROXY")
        no_proxy_set.setenv("HTTP_PROXY", f"http://me:wrong@127.0.0.1:{proxy.server_port}")
        with pytest.raises(ConfigError, match="407") as refused:
            _store(served.url).task_state(T).get("k")
        assert "wrong" not in str(refused.value)


def test_https_through_a_connect_tunnel_with_the_proxys_credentials(
    tmp_path: Path, no_proxy_set: pytest.MonkeyPatch
) -> None:
    """`HTTPS_PROXY` with user info: a CONNECT tunnel carrying `Proxy-Authorization`, TLS to
    the server itself through it (its certificate checked), sync and async; wrong credentials
    are a ConfigError at once that shows no password."""
    httpd, url, cert = _tls_fake(tmp_path)
    no_proxy_set.setenv("SSL_CERT_FILE", str(cert))
    basic = "Basic " + base64.b64encode(b"me:p@ss").decode()
    try:
        with running_proxy(authorization=basic) as proxy:
            port = proxy.server_port
            no_proxy_set.setenv("HTTPS_PROXY", f"http://me:p%40ss@127.0.0.1:{port}")
            state = _store(url).task_state(T)
            assert state.get("k", "absent") == "absent"
            assert asyncio.run(state.aget("k", "absent")) == "absent"
            tunnels = [(m, target, auth) for m, target, auth in proxy.seen]
            assert tunnels == [("CONNECT", f"127.0.0.1:{httpd.server_port}", basic)] * 2
            assert [method for method, _, _ in _Fake.seen] == ["GET", "GET"]
            assert all("Proxy-Authorization" not in headers for _, _, headers in _Fake.seen)
            no_proxy_set.setenv("HTTPS_PROXY", f"http://me:wrong@127.0.0.1:{port}")
            started = time.monotonic()
            with pytest.raises(ConfigError, match="407") as refused:
                _store(url).task_state(T).get("k")
            assert time.monotonic() - started < 10  # not retried for the window
            assert "wrong" not in str(refused.value) and f":{port}" in str(refused.value)
            no_proxy_set.setenv("HTTPS_PROXY", f"socks5://127.0.0.1:{port}")
            with pytest.raises(ConfigError, match="not an http:// proxy"):
                _store(url)
    finally:
        httpd.shutdown()


@pytest.mark.parametrize(
    ("no_proxy", "hostport", "covered"),
    [
        ("*", "anything:1", True),
        ("example.com", "api.example.com:443", True),
        (".example.com", "example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("example.com", "notexample.com", False),
        ("10.0.0.0/8", "10.1.2.3:8765", True),
        ("10.0.0.0/8", "11.0.0.1", False),
        ("::1", "[::1]:8765", True),
        ("[::1]:9000", "[::1]:8765", False),
        ("host:8765", "host:8765", True),
        ("host:8765", "host:80", False),
        (" , ", "host", False),
    ],
)
def test_no_proxy_reads_as_requests_reads_it(no_proxy: str, hostport: str, covered: bool) -> None:
    assert no_proxy_covers(no_proxy, hostport) is covered


def test_a_server_that_never_answers_is_a_timeout_and_a_write_is_not_resent() -> None:
    """The connection opens (the kernel accepts it) and the request goes out, but no answer
    comes: a conditional write is OutcomeUnknownError after one timeout (it may have landed;
    the accessors resolve it by reading), a read is retried within the window."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # never accepted, never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/taskstate"
        client = HttpBackend(url, token="t", timeout=0.5, retry_window=1.0).http
        started = time.monotonic()
        with pytest.raises(OutcomeUnknownError, match="may or may not"):
            client.send(CONDITIONAL)
        assert time.monotonic() - started < 3  # one timeout: not sent again
        with pytest.raises(BackendUnavailableError, match="after retrying for 1 s"):
            client.send(Request("GET", "/x"))


def test_a_readiness_check_reports_the_server_as_it_is_now(fake: str) -> None:
    """`db check` / `doctor` over HTTP: the store behind the server is unready (503) — one
    request, at once an error (exit 1), not 30 s of retrying first."""
    unready = b'{"status":"unavailable","detail":"the store cannot be read"}'
    _Fake.answers = [(503, JSON, unready, {"Retry-After": "1"})]
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match="cannot be read"):
        _store(fake).schema_status()
    assert time.monotonic() - started < 5 and len(_Fake.seen) == 1


def test_503_is_retried_with_backoff_then_answered(fake: str) -> None:
    _Fake.answers = [(503, JSON, b"{}", {}), (503, JSON, b"{}", {}), ABSENT]
    assert _store(fake).task_state(T).get("k", "absent") == "absent"
    assert len(_Fake.seen) == 3


def test_a_page_that_is_not_the_api_is_never_success(fake: str) -> None:
    """Defect 3: an SSO page's 200 text/html is a ConfigError naming the URL, for reads and
    writes alike (nothing reports success the server did not confirm)."""
    _Fake.answers = [(200, "text/html", b"<html>sign in</html>", {})]
    state = _store(fake).task_state(T)
    for call in (lambda: state.set("k", 1), lambda: state.get("k"), state.keys):
        with pytest.raises(ConfigError, match=r"127\.0\.0\.1.*200 text/html.*taskstate_url"):
            call()


def test_the_body_limit_and_the_size_rule_are_one_error(fake: str) -> None:
    """Defect 10: 413 (the body limit) and a size 422 both raise ValueTooLargeError."""
    too_large = b'{"detail":[{"loc":["body","value"],"msg":"too large","type":"value_error"}]}'
    _Fake.answers = [
        (413, JSON, b'{"detail":"over"}', {}),
        (422, JSON, too_large, {"X-Taskstate-Error": "ValueTooLargeError"}),
    ]
    state = _store(fake, max_value_storage_bytes=0).task_state(T)
    for _ in range(2):
        with pytest.raises(ValueTooLargeError):
            state.set("k", "x")


def test_user_info_in_the_url_is_never_printed_nor_sent(fake: str) -> None:
    """Defect 18: no password in repr/describe; the bearer token, not Basic auth, is sent."""
    _Fake.answers = [ABSENT]
    url = fake.replace("http://", "http://ops:hunter2@")
    store = StateStore(url, settings=Settings(), backend=HttpBackend(url, token="tok"))
    assert "hunter2" not in repr(store) and "hunter2" not in store.describe()
    store.task_state(T).get("k")
    ((_, _, headers),) = _Fake.seen
    assert headers["Authorization"] == "Bearer tok"


def test_a_wrong_base_path_raises_instead_of_reading_absent(served: Server) -> None:
    """Defect 7: a 404 from no route is not "no such key" (a resumable job would resubmit)."""
    wrong = _store(served.url.replace("/taskstate", "/wrong")).task_state(T)
    with pytest.raises(ConfigError, match="taskstate_url"):
        wrong.get("job_id")
    right = _store(served.url).task_state(T)
    assert right.get("job_id", "absent") == "absent"


def test_the_server_stores_typed_errors_come_back_as_themselves(served: Server) -> None:
    state = _store(served.url).task_state(T)
    # Checked here first (no round trip) ...
    with pytest.raises(InvalidKeyError):
        state.set("k" * 600, 1)
    # ... and by the server's store: the same class either way.
    null = Request("PUT", "/api/v2/assets/state-store/k", {"name": "a"}, b'{"value":null}')
    with pytest.raises(InvalidValueError, match="delete"):
        HttpBackend(served.url, token="").http.send(null)
    response = httpx.put(served.url + null.path, params=null.params, json={"value": None})
    assert response.status_code == 422
    assert response.headers["X-Taskstate-Error"] == "InvalidValueError"


@pytest.mark.parametrize("ids", [(".", "..", "."), ("d", "r", ".")])
def test_dot_ids_are_ids_not_path_steps(served: Server, ids: tuple[str, str, str]) -> None:
    """Defect 6: task `.` key `state-store/x` must not land in task `state-store`'s key `x`."""
    store = _store(served.url)
    store.task_state(TaskScope(*ids)).set("state-store/x", 1)
    assert store.task_state(TaskScope(*ids)).get("state-store/x") == 1
    assert store.task_state(TaskScope(ids[0], ids[1], "state-store")).keys() == []


def test_offloading_on_an_http_worker_is_refused_at_configuration(served: Server) -> None:
    """Defect 22: the server's store decides where values live."""
    with pytest.raises(ConfigError, match=r"state_store_backend.*HTTP"):
        StateStore(
            served.url,
            settings=Settings(worker_backend="taskstate.backends.offload.OffloadBackend"),
            backend=HttpBackend(served.url, token=""),
            worker_backend=OffloadBackend.__new__(OffloadBackend),
        )


def test_database_only_operations_say_where_to_run(served: Server) -> None:
    """`cleanup`, `db migrate` and `import` over HTTP raise instead of reporting 0;
    `clear_task`, `entries` and `scopes` have routes."""
    store = _store(served.url)
    for call in (
        store.cleanup,
        store.migrate,
        lambda: store.import_entries([(T, "k", 1, None, None, None)]),
    ):
        with pytest.raises(ConfigError, match="where the database is"):
            call()
    for index in (-1, 2):
        store.task_state(TaskScope("d", "r", "t", index)).set("k", index)
    assert [(s, e.value) for s, e in store.entries()] == [
        (TaskScope("d", "r", "t", -1), -1),
        (TaskScope("d", "r", "t", 2), 2),
    ]
    assert store.clear_task("d", "r", "t") == 2
    assert list(store.scopes()) == []


def test_async_twins_use_their_own_connections(served: Server) -> None:
    state = _store(served.url).task_state(T)

    async def run() -> tuple[object, object]:
        await state.aset("a", [1])
        got = await state.aget("a")
        await state.adelete("a")
        return got, await state.aget("a", "gone")

    assert asyncio.run(run()) == ([1], "gone")


class _LoseOneAnswer(http.server.BaseHTTPRequestHandler):
    """A proxy to the real server that forwards the first conditional PUT and then drops the
    connection without answering: the write landed, its answer was lost."""

    target = ""
    dropped = 0

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = httpx.request(self.command, self.target + self.path, content=body, headers=headers)
        if self.command == "PUT" and "X-Taskstate-Write-Id" in self.headers and not self.dropped:
            type(self).dropped += 1
            self.connection.close()  # the write landed; its answer never arrives
            return
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in ("transfer-encoding", "connection", "date", "server"):
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_PUT = do_DELETE = _forward

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _proxied(
    served: Server, handler: type[_LoseOneAnswer] | type[_LoseAnswerAfterOverwrite]
) -> Iterator[str]:
    """`handler` as a proxy in front of `served`: the URL to reach it through."""
    handler.target = served.url.rsplit("/taskstate", 1)[0]
    if issubclass(handler, _LoseOneAnswer):
        handler.dropped = 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/taskstate"
    finally:
        httpd.shutdown()


def test_a_lost_answer_to_an_update_does_not_apply_it_twice(served: Server) -> None:
    """The write id resolves the unknown outcome: fn's result once, the value once."""
    with _proxied(served, _LoseOneAnswer) as url:
        state = _store(url).task_state(T)
        state.set("n", 1)
        assert state.update("n", lambda v: v + 1) == 2
        assert _LoseOneAnswer.dropped == 1
        assert state.get("n") == 2


class _LoseAnswerAfterOverwrite(http.server.BaseHTTPRequestHandler):
    """A proxy to the real server that forwards the first conditional PUT (it lands), lets
    another writer change the key (+100: a busy shared counter never keeps the lost write's id
    for long), and only then loses the answer: `how` is "drop" (the connection closed without
    answering) or a balancer's 502/504. `advertise` False strips the server's ledger header,
    so the client sees a server that keeps no write ledger."""

    target = ""
    how = "drop"
    advertise = True
    write_ids: ClassVar[list[str]] = []  # of every conditional PUT, in the order sent

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = httpx.request(self.command, self.target + self.path, content=body, headers=headers)
        write_id = self.headers.get("X-Taskstate-Write-Id")
        lose = self.command == "PUT" and write_id is not None and not self.write_ids
        if write_id is not None and self.command == "PUT":
            self.write_ids.append(write_id)
        if lose:  # landed; now someone else's write lands on top of it
            auth = {"Authorization": self.headers["Authorization"]}
            value = httpx.get(self.target + self.path, headers=auth).json()["value"] + 100
            httpx.put(self.target + self.path, json={"value": value}, headers=auth)
            if self.how == "drop":
                self.connection.close()  # its answer never arrives
                return
            self.send_response(int(self.how))
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"bad")
            return
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() in ("transfer-encoding", "connection", "date", "server"):
                continue
            if name.lower() == "x-taskstate-write-ids" and not self.advertise:
                continue
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_PUT = do_DELETE = _forward

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("how", ["drop", "502", "504"])
def test_a_lost_answer_is_resent_with_its_write_id_and_applied_once(
    served: Server, how: str
) -> None:
    """The server keeps the write ledger: the client sends the same PUT again (the same write
    id), the server answers with the first outcome, and the update returns its own result —
    no error, and the increment counted once though the key moved on before the re-send."""
    _LoseAnswerAfterOverwrite.how, _LoseAnswerAfterOverwrite.advertise = how, True
    _LoseAnswerAfterOverwrite.write_ids = []
    with _proxied(served, _LoseAnswerAfterOverwrite) as url:
        state = _store(url).task_state(T)
        state.set("n", 1)
        assert state.update("n", lambda v: v + 1) == 2
        ids = _LoseAnswerAfterOverwrite.write_ids
        assert len(ids) == 2 and ids[0] == ids[1]  # the same request, sent again
        assert state.get("n") == 102  # 1, our increment once, the other writer's +100


def test_a_lost_answer_from_a_server_without_the_ledger_is_unknown_not_applied_again(
    served: Server,
) -> None:
    """A server that does not say it keeps the write ledger (an older one): the write is not
    sent again, and once the key moved on `fn` is not applied a second time (that would
    count one increment twice); the caller is told the outcome is unknown."""
    _LoseAnswerAfterOverwrite.how, _LoseAnswerAfterOverwrite.advertise = "drop", False
    _LoseAnswerAfterOverwrite.write_ids = []
    with _proxied(served, _LoseAnswerAfterOverwrite) as url:
        state = _store(url).task_state(T)
        state.set("n", 1)
        with pytest.raises(OutcomeUnknownError, match="not applied again"):
            state.update("n", lambda v: v + 1)
        assert len(_LoseAnswerAfterOverwrite.write_ids) == 1
        assert state.get("n") == 102


def test_duplicates_of_one_write_id_sent_at_once_get_one_outcome(served: Server) -> None:
    """Eight copies of one create-if-absent PUT (one write id) at once, straight to the
    server: one creates the key, every copy is answered 204 with that write's ETag."""
    url = served.url + "/api/v2/dags/dag/dagRuns/run/taskInstances/task/state-store/lease"
    headers = {"If-None-Match": "*", "X-Taskstate-Write-Id": "lease-1",
               "Authorization": "Bearer t"}  # fmt: skip
    start = threading.Barrier(8)
    answers: list[httpx.Response] = []

    def send() -> None:
        start.wait()
        answers.append(httpx.put(url, json={"value": "me"}, headers=headers, timeout=30))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [a.status_code for a in answers] == [204] * 8, [a.text for a in answers]
    assert len({a.headers["etag"] for a in answers}) == 1
    assert httpx.get(url).headers["etag"] == answers[0].headers["etag"]
    assert all(a.headers["x-taskstate-write-ids"] == "recorded" for a in answers)


@pytest.mark.parametrize("status", [502, 504])
def test_a_proxys_502_or_504_to_a_write_is_an_unknown_outcome(fake: str, status: int) -> None:
    """A balancer answers 502/504 when the server it handed the write to failed or was slow:
    the write may have been applied, so it is neither sent again nor reported as 'not
    applied' (BackendUnavailableError alone); a read is retried as before."""
    _Fake.answers = [(status, "text/html", b"<html>bad gateway</html>", {})]
    client = HttpBackend(fake, token="t", retry_window=0.5).http
    with pytest.raises(OutcomeUnknownError, match=f"HTTP {status}"):
        client.send(CONDITIONAL)
    assert [method for method, _, _ in _Fake.seen] == ["PUT"]
    with pytest.raises(BackendUnavailableError, match="after retrying") as raised:
        client.send(Request("GET", "/x"))
    assert not isinstance(raised.value, OutcomeUnknownError)


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


def test_the_writer_is_named_by_the_credentials(tmp_path: Path) -> None:
    """A task-instance token writes as its task (Airflow's `kind: task`), a pool token as
    `api` with its subject — whatever the worker's accessor would have claimed."""
    keys = SigningKeys([SECRET])
    scope = TaskScope("d", "r", "t", 2)
    as_task = keys.issue(
        Claims(subject="task:d/r/t/2", dag_ids=("d",), run_id="r", task_id="t",
               map_index=2, try_number=1)
    )  # fmt: skip
    pool = keys.issue(Claims(subject="pool-a", dag_ids=("d",)))
    with (
        StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings()) as database,
        running(standalone_app(database, keys)) as base,
    ):
        url = base + "/taskstate"
        for token, key in ((as_task, "by_task"), (pool, "by_pool")):
            remote = StateStore(url, settings=Settings(), backend=HttpBackend(url, token=token))
            remote.task_state(scope, writer={"kind": "watcher"}).set(key, 1)
            assert remote.task_state(scope).update("n", lambda n: n + 1, default=0) >= 1
        entries = {e.key: e.updated_by for e in database.task_state(scope).page().items}
    assert entries["by_task"] == {
        "kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": 2,
        "try_number": 1,  # the token's try
    }  # fmt: skip
    assert entries["by_pool"] == {"kind": "api", "subject": "pool-a"}
    write_id = entries["n"].pop("write_id")  # the pool's update: a conditional write
    assert write_id and entries["n"] == {"kind": "api", "subject": "pool-a"}


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
