"""A whole deployment on loopback, driven by many workers while faults are injected (issue 24).

    PostgreSQL (its own instance) <- PgBouncer (transaction pooling) <- 2-3 `taskstate serve
    --workers N` replicas sharing one secret key <- HAProxy (round robin, health check on the
    store-reading /health, `retry-on conn-failure` only) <- worker processes (HTTP backend,
    one pool token), each running a checkpoint loop.

All real processes on 127.0.0.1 and free ports, with the configs written here. The same code
backs `scripts/fleet.sh` (`python -m tests.fleet up`), the CI test (tests/test_fleet.py) and
`bench/fleet.py`; `check()` asserts the invariants from PostgreSQL directly.

A worker's checkpoint loop (the skill's `etl_with_checkpoint`, plus what a busy estate adds):
per record i, `set("last_cursor", i + 1)` on its own task instance and read it back at once
(through the balancer: usually another replica), `update` a shared counter, and once per round
`compare_and_set(f"lease:{r}", None, worker_id)`. Every call is timed and every error kept, so
the checker can say which writes were acknowledged and the bench what the latencies were.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.pgbouncer_server import PgBouncer
from tests.postgres_server import PostgresServer, debian_command, free_port, wait_for_http

ROOT = Path(__file__).resolve().parent.parent
DAG = "fleet"
RUN = "run"  # the probes' run; each driven run has its own (`RunReport.run`)
SHARED = "shared"  # the task instance holding the counter and the leases
COUNTER = "counter"
CURSOR = "last_cursor"
RETRY_WINDOW = 30.0  # the HTTP client's documented window (docs/deployment.md)
TIMEOUT = 10.0  # the HTTP client's documented per-request timeout


def secret(tag: str) -> str:
    return f"fleet-{tag}-" + "k" * 32


class Replica:
    """One `taskstate serve --workers N` in its own process group (uvicorn's supervisor and its
    worker processes), so a fault reaches all of them at once."""

    def __init__(self, index: int, store_url: str, root: Path, *, workers: int) -> None:
        self.index = index
        self.name = f"r{index}"
        self.store_url = store_url
        self.root = root
        self.workers = workers
        self.port = free_port()
        self.keys = secret("old")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/taskstate"

    def start(self, keys: str | None = None) -> None:
        """Start (again) on the same port, with `keys` (`[state_store] taskstate_secret_key`)."""
        if keys is not None:
            self.keys = keys
        log = open(self.root / f"{self.name}.log", "ab")  # noqa: SIM115  # the child keeps it
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(self.root),
            "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": self.keys,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskstate", "--url", self.store_url, "serve",
             "--port", str(self.port), "--workers", str(self.workers), "--log-level", "warning"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        try:
            wait_for_http(self.url + "/health", self.proc, f"replica {self.name}", 60)
        except RuntimeError as exc:
            log_text = (self.root / f"{self.name}.log").read_text()[-3000:]
            raise RuntimeError(f"{exc}; its log:\n{log_text}") from None

    def signal(self, signum: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def kill(self) -> None:
        """kill -9 the supervisor and every worker process."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
        self._wait_port_free()

    def stop(self) -> None:
        """A graceful stop (SIGTERM: in-flight requests finish), as a rolling restart does."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)  # a stopped group would never see the SIGTERM
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)
        self.signal(signal.SIGKILL)  # any worker process that outlived its supervisor
        self._wait_port_free()

    def _wait_port_free(self) -> None:
        """uvicorn's workers may close the listening socket a moment after the supervisor."""
        import socket

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", self.port))
                    return
                except OSError:
                    time.sleep(0.05)


class Upstream(Protocol):
    """A server the balancer sends requests to (a replica, or Airflow's api-server), on
    127.0.0.1, with the API under /taskstate."""

    name: str
    port: int


class HAProxy:
    """Debian's haproxy in front of the replicas: round robin, a health check on the
    store-reading `/health` every 500 ms (down after 2 failures), and `retry-on conn-failure`
    only (with `option redispatch`): a request that reached a replica is never sent again by
    the balancer — resending a write is the client's decision, which knows if it is safe."""

    def __init__(self, replicas: Sequence[Upstream], root: Path) -> None:
        self.binary = debian_command("haproxy", "haproxy")
        self.replicas = replicas
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/taskstate"

    def config(self) -> str:
        servers = [f"    server {r.name} 127.0.0.1:{r.port} check" for r in self.replicas]
        return "\n".join(
            [
                "global",
                "    maxconn 4096",
                # The runtime API: a rolling restart drains a replica here before stopping it.
                f"    stats socket {self.root / 'haproxy.sock'} mode 600 level admin",
                "defaults",
                "    mode http",
                "    timeout connect 1s",
                "    timeout client 120s",
                # Longer than the client's 10 s: the client, not the balancer, gives up on a
                # request (a 504 for a write would be an unknown outcome it has to resolve).
                "    timeout server 60s",
                "    timeout check 1s",
                "    retries 3",
                "    retry-on conn-failure",
                "    option redispatch 1",
                "frontend taskstate",
                f"    bind 127.0.0.1:{self.port}",
                "    default_backend replicas",
                "backend replicas",
                "    balance roundrobin",
                "    option httpchk GET /taskstate/health",
                "    http-check expect status 200",
                "    default-server inter 500ms fall 2 rise 1",
                *servers,
                "",
            ]
        )

    def start(self) -> None:
        path = self.root / "haproxy.cfg"
        path.write_text(self.config())
        log = open(self.root / "haproxy.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [self.binary, "-f", str(path), "-db"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_for_http(self.url + "/health", self.proc, "haproxy", 30)

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(10)

    def admin(self, command: str) -> str:
        """One command on the runtime API (its answer)."""
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.root / "haproxy.sock"))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def drain(self, replica: Replica) -> None:
        """No new request goes to `replica`; returns once those it has are answered, so it
        can be stopped without a request reaching a closing server (a write there would be
        an unknown outcome, a read a retry)."""
        self.admin(f"set server replicas/{replica.name} state maint")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = [line.split(",") for line in self.admin("show stat").splitlines()]
            busy = [r for r in rows if r[:2] == ["replicas", replica.name] and r[4] != "0"]
            if not busy:
                return
            time.sleep(0.05)
        raise RuntimeError(f"replica {replica.name} kept its requests for 30 s")

    def ready(self, replica: Replica) -> None:
        self.admin(f"set server replicas/{replica.name} state ready")


class Fleet:
    """The deployment: `start()`, the parts as attributes, `stop()`."""

    def __init__(self, *, replicas: int = 2, serve_workers: int = 1, pool_size: int = 8) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="taskstate-fleet-"))
        self.postgres = PostgresServer()
        self.pool_size = pool_size
        self.bouncer: PgBouncer | None = None
        self.replica_count = replicas
        self.serve_workers = serve_workers
        self.replicas: list[Replica] = []
        self.active: list[Replica] = []  # those the balancer sends requests to
        self.haproxy: HAProxy | None = None

    @property
    def url(self) -> str:
        """What the workers use: the balancer."""
        assert self.haproxy is not None
        return self.haproxy.url

    def start(self) -> Fleet:
        os.environ.setdefault("PGPASSWORD", "secret")  # the server harness's psql calls
        self.postgres.start()
        # PgBouncer waits for a server connection instead of refusing while PostgreSQL restarts;
        # 20 s is inside the client's retry window.
        self.bouncer = PgBouncer(self.postgres, pool_size=self.pool_size, query_wait_timeout=20)
        self.bouncer.start()
        from taskstate import StateStore

        with StateStore(self.postgres.url) as store:  # `taskstate db migrate`, once
            store.migrate()
        self.replicas = [
            Replica(i, self.bouncer.url, self.root, workers=self.serve_workers)
            for i in range(self.replica_count)
        ]
        for replica in self.replicas:
            replica.start()
        self.haproxy = HAProxy(self.replicas, self.root)
        self.haproxy.start()
        self.active = list(self.replicas)
        return self

    def use(self, count: int) -> None:
        """The balancer sends requests to the first `count` replicas only (the others stay
        up, in maintenance): one fleet measured with 1, 2 and 3 replicas."""
        assert self.haproxy is not None
        for n, replica in enumerate(self.replicas):
            if n < count:
                self.haproxy.ready(replica)
            elif replica in self.active:
                self.haproxy.drain(replica)
        self.active = self.replicas[:count]

    def token(self, key: str) -> str:
        """A pool token for the fleet's DAG, signed with `key`."""
        from taskstate.api.tokens import Claims, SigningKeys

        return SigningKeys([key]).issue(Claims(subject="pool-fleet", dag_ids=(DAG,)))

    def stop(self) -> None:
        """Everything stopped; its configs and logs deleted unless TASKSTATE_FLEET_KEEP is set
        (then the path is printed)."""
        if self.haproxy is not None:
            self.haproxy.kill()
        for replica in self.replicas:
            replica.signal(signal.SIGCONT)
            replica.signal(signal.SIGKILL)
        if self.bouncer is not None:
            self.bouncer.stop()
        self.postgres.stop()
        if os.environ.get("TASKSTATE_FLEET_KEEP"):
            print(f"fleet: configs and logs kept in {self.root}", file=sys.stderr)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_fleet(**options: Any) -> Iterator[Fleet]:
    fleet = Fleet(**options)
    try:
        yield fleet.start()
    finally:
        fleet.stop()


# -- the workers ----------------------------------------------------------------------------


@dataclass
class WorkerSpec:
    """What one worker process does: `records` records, else until the file `stop` exists
    (the driver's signal)."""

    worker_id: str
    run: str  # the Airflow-like run id every worker of one drive shares
    url: str
    token_file: Path
    out: Path
    records: int = 0
    round_size: int = 5  # records per lease round
    rate: float = 0.0  # records per second; 0 = as fast as it can (closed loop)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "tests.fleet", "worker", json.dumps(self.as_json())]

    @property
    def stop(self) -> Path:
        return self.out.parent / "stop"

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "token_file": str(self.token_file), "out": str(self.out)}

    def more(self, done: int) -> bool:
        return done < self.records if self.records else not self.stop.exists()


@dataclass
class WorkerResult:
    worker_id: str
    records: int = 0  # cursor writes acknowledged
    updates: int = 0  # counter updates acknowledged
    unknown_updates: int = 0  # counter updates whose outcome the client could not tell
    unknown_leases: int = 0  # lease attempts whose outcome was read back
    leases: list[int] = field(default_factory=list)  # rounds this worker won
    rounds: list[int] = field(default_factory=list)  # rounds it tried
    stale_reads: list[list[Any]] = field(default_factory=list)  # [time, wrote, read]
    errors: list[list[Any]] = field(default_factory=list)  # [start, end, op, class, message]
    ops: dict[str, list[list[float]]] = field(default_factory=dict)  # op -> [[start, secs]]


def run_worker(spec: WorkerSpec) -> WorkerResult:
    """The checkpoint loop; writes its result to `spec.out` (JSON) when done."""
    from taskstate import StateStore, TaskScope
    from taskstate.backends.http import HttpBackend
    from taskstate.errors import OutcomeUnknownError, TaskStateError
    from taskstate.ops import add

    token_text = spec.token_file.read_text().strip()
    if spec.url.startswith("postgresql"):  # a worker with database access (through PgBouncer)
        backend = None
        store = StateStore(spec.url)
    else:
        backend = HttpBackend(
            spec.url, token=token_text, timeout=TIMEOUT, retry_window=RETRY_WINDOW
        )
        store = StateStore(backend=backend)
    mine = store.task_state(TaskScope(DAG, spec.run, spec.worker_id))
    shared = store.task_state(TaskScope(DAG, spec.run, SHARED))
    result = WorkerResult(spec.worker_id)
    token_seen = spec.token_file.stat().st_mtime_ns

    def timed(op: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One call, timed; a TaskStateError is kept and re-raised."""
        start = time.time()
        t0 = time.perf_counter()
        try:
            return call(*args, **kwargs)
        except TaskStateError as exc:
            failed = [start, time.time(), op, type(exc).__name__, str(exc)[:800]]
            result.errors.append(failed)
            raise
        finally:
            result.ops.setdefault(op, []).append([start, time.perf_counter() - t0])

    cursor = timed("get", mine.get, CURSOR, default=0)
    (spec.out.parent / f"{spec.worker_id}.ready").touch()
    i = cursor
    started = time.monotonic()
    while spec.more(i):
        if spec.rate:  # paced: record i starts at its slot, not earlier
            slot = started + (i - cursor) / spec.rate
            if slot > time.monotonic():
                time.sleep(slot - time.monotonic())
        # A rotated key: the driver writes the new token, the worker sends it from now on.
        seen = spec.token_file.stat().st_mtime_ns
        if seen != token_seen:
            token_seen = seen
            if backend is not None:
                backend.use_token(spec.token_file.read_text().strip())
            (spec.out.parent / f"{spec.worker_id}.token").write_text(str(seen))
        record = i + 1
        try:
            timed("set", mine.set, CURSOR, record)
            result.records = record
            got = timed("get", mine.get, CURSOR)
            if got != record:
                result.stale_reads.append([time.time(), record, got])
        except TaskStateError:
            continue  # the same record again (as a task's retry would)
        try:
            # An update operation: one request over HTTP, applied once by the server's
            # transaction (a lambda would be GET + conditional PUT, one winner per round trip).
            timed("update", shared.update, COUNTER, add(1), default=0)
            result.updates += 1
        except OutcomeUnknownError:
            result.unknown_updates += 1
        except TaskStateError:
            pass  # not applied: an error said so
        if i % spec.round_size == 0:
            r = i // spec.round_size
            lease = f"lease:{r}"
            result.rounds.append(r)
            try:
                won = timed("cas", shared.compare_and_set, lease, None, spec.worker_id)
            except OutcomeUnknownError:
                # Its answer lost and the key changed since: read it back, as the docs say.
                won = _read_back(shared, lease) == spec.worker_id
                result.unknown_leases += 1
            except TaskStateError:
                won = False  # not applied (an error said so)
            if won:
                result.leases.append(r)
        i += 1
    store.close()
    spec.out.write_text(json.dumps(result.__dict__))
    return result


def _read_back(state: Any, key: str) -> Any:
    """The key's value, asked until it answers (the outage that lost the answer may last)."""
    from taskstate.errors import BackendUnavailableError

    while True:
        with contextlib.suppress(BackendUnavailableError):
            return state.get(key)


# -- faults ---------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    start: float  # epoch seconds: injected
    end: float = 0.0  # epoch seconds: the part is back (restarted, resumed)
    recovered: float = 0.0  # epoch seconds: a write through the balancer succeeds again
    detail: str = ""


FAULTS = ("kill_replica", "stop_replica", "restart_pgbouncer", "restart_postgres",
          "kill_haproxy", "rotate_key")  # fmt: skip


class Injector:
    """Injects faults into a running fleet, one at a time, and times each one's recovery (the
    first write through the balancer that succeeds after the part is back)."""

    def __init__(
        self, fleet: Fleet, token_file: Path, status_dir: Path, workers: list[str], url: str
    ) -> None:
        self.fleet = fleet
        self.url = url  # what the workers use: the balancer, or PgBouncer
        self.token_file = token_file
        self.status_dir = status_dir
        self.workers = workers
        self.faults: list[Fault] = []

    def inject(self, kind: str) -> Fault:
        fault = Fault(kind, time.time())
        self.faults.append(fault)
        getattr(self, kind)(fault)
        fault.end = time.time()
        fault.recovered = self._probe_write()
        return fault

    def _probe_write(self) -> float:
        """When a write the way the workers go (no retries of its own) first succeeds."""
        from taskstate import StateStore, TaskScope
        from taskstate.backends.base import StateBackend
        from taskstate.backends.http import HttpBackend
        from taskstate.backends.postgres import PostgresBackend
        from taskstate.errors import TaskStateError

        backend: StateBackend
        if self.url.startswith("postgresql"):
            backend = PostgresBackend(self.url, retry_window_s=0, connect_timeout_s=2)
        else:
            token = self.fleet.token(self._signing_key())
            backend = HttpBackend(self.url, token=token, timeout=2, retry_window=0)
        probe = StateStore(backend=backend).task_state(TaskScope(DAG, RUN, "probe"))
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    probe.set("probe", time.time())
                    return time.time()
                except TaskStateError:
                    time.sleep(0.05)
            raise RuntimeError("the fleet did not recover within 120 s")
        finally:
            backend.close()

    def _signing_key(self) -> str:
        return self.fleet.replicas[0].keys.split(",")[0]

    def _replica(self) -> Replica:
        return random.choice(self.fleet.active)

    def kill_replica(self, fault: Fault) -> None:
        replica = self._replica()
        fault.detail = replica.name
        replica.kill()
        time.sleep(1)
        replica.start()

    def stop_replica(self, fault: Fault) -> None:
        replica = self._replica()
        fault.detail = replica.name
        replica.signal(signal.SIGSTOP)
        time.sleep(10)
        replica.signal(signal.SIGCONT)

    def restart_pgbouncer(self, fault: Fault) -> None:
        assert self.fleet.bouncer is not None
        self.fleet.bouncer.kill()
        self.fleet.bouncer.start()

    def restart_postgres(self, fault: Fault) -> None:
        self.fleet.postgres.restart()

    def kill_haproxy(self, fault: Fault) -> None:
        assert self.fleet.haproxy is not None
        self.fleet.haproxy.kill()
        time.sleep(3)
        self.fleet.haproxy.start()

    def rotate_key(self, fault: Fault) -> None:
        """Replicas on `new,old` one at a time, then the workers' token from `new`, then the
        replicas on `new` alone: no request is refused at any step."""
        old = self._signing_key()
        new = secret(f"k{len(self.faults)}")
        fault.detail = "rolling restarts new,old then new"
        self._rolling_restart(f"{new},{old}")
        # Whole or not at all: a worker that reads the file between write_text's truncation and
        # its write sends an empty token (two workers were refused so, at the same instant).
        staged = self.token_file.with_suffix(".new")
        staged.write_text(self.fleet.token(new))
        os.replace(staged, self.token_file)
        mtime = str(self.token_file.stat().st_mtime_ns)
        # A worker reads the token between records, and 64 workers on one hot counter on a
        # loaded machine take a minute and more per record.
        deadline = time.monotonic() + 300
        while not all(self._took(w, mtime) for w in self.workers):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not take the new token within 300 s")
            time.sleep(0.1)
        self._rolling_restart(new)

    def _rolling_restart(self, keys: str) -> None:
        """One replica at a time: drained at the balancer, stopped, started with `keys`,
        given requests again."""
        assert self.fleet.haproxy is not None
        for replica in self.fleet.replicas:
            active = replica in self.fleet.active
            if active:
                self.fleet.haproxy.drain(replica)
            replica.stop()
            replica.start(keys)
            if active:
                self.fleet.haproxy.ready(replica)

    def _took(self, worker: str, mtime: str) -> bool:
        path = self.status_dir / f"{worker}.token"
        done = (self.status_dir / f"{worker}.json").exists()
        return done or (path.exists() and path.read_text() == mtime)


# -- a run and its checks -----------------------------------------------------------------


@dataclass
class RunReport:
    run: str
    workers: list[WorkerResult]
    faults: list[Fault]
    ryw: dict[str, int]  # read-your-writes across replicas: probes and violations
    started: float
    ended: float


def drive(
    fleet: Fleet,
    *,
    workers: int,
    records: int = 0,
    seconds: float = 0.0,
    rate: float = 0.0,
    faults: list[str] | None = None,
    round_size: int = 5,
    url: str | None = None,
    settle: float = 3.0,
) -> RunReport:
    """Start `workers` worker processes against `url` (the balancer by default) and, once
    every one has made its first call, inject `faults` (in order, each at a random point).
    With `records` each worker stops after that many; else all stop together `seconds` after
    they were ready, or `settle` seconds after the last fault, whichever is later. The
    report's `started`/`ended` span the time every worker was working."""
    run = f"run-{time.time_ns()}"
    out = fleet.root / run
    out.mkdir()
    token_file = out / "token"
    token_file.write_text(fleet.token(fleet.replicas[0].keys.split(",")[0]))
    names = [f"w{n:03d}" for n in range(workers)]
    specs = [
        WorkerSpec(name, run, url or fleet.url, token_file, out / f"{name}.json", records,
                   round_size, rate)
        for name in names
    ]  # fmt: skip
    procs = []
    for s in specs:
        with open(out / f"{s.worker_id}.err", "wb") as err:
            procs.append(
                subprocess.Popen(s.argv(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
            )
    injector = Injector(fleet, token_file, out, names, url or fleet.url)
    ryw = {"probes": 0, "violations": 0}
    stop = threading.Event()
    prober = threading.Thread(target=_read_your_writes, args=(fleet, ryw, stop), daemon=True)
    try:
        # Python starting 64 processes on a busy machine takes a while: time the work only.
        while not all((out / f"{name}.ready").exists() for name in names):
            if any(p.poll() is not None for p in procs):
                break  # one failed to start: its missing result says why, below
            time.sleep(0.05)
        started = time.time()
        prober.start()
        for kind in faults or []:
            time.sleep(random.uniform(0.5, 2.0))  # a random point, with room for the rest
            if all(p.poll() is not None for p in procs):
                raise RuntimeError(f"the workers finished before fault {kind!r}: give more work")
            injector.inject(kind)
        if not records:
            time.sleep(max(settle, started + seconds - time.time()))
            specs[0].stop.touch()
        for proc in procs:
            proc.wait()
        ended = time.time()
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if prober.is_alive():
            prober.join(10)
    results = []
    for s in specs:
        if not s.out.exists():
            err = (out / f"{s.worker_id}.err").read_text()[-2000:]
            raise RuntimeError(f"worker {s.worker_id} left no result: {err}")
        results.append(WorkerResult(**json.loads(s.out.read_text())))
    return RunReport(run, results, injector.faults, ryw, started, ended)


def _read_your_writes(fleet: Fleet, counts: dict[str, int], stop: threading.Event) -> None:
    """A value written through one replica is read at once through another (straight to the
    replicas, not the balancer); a replica that is down for a fault is skipped."""
    from taskstate import StateStore, TaskScope
    from taskstate.backends.http import HttpBackend
    from taskstate.errors import TaskStateError

    n = 0
    while not stop.is_set():
        replicas = list(fleet.active)
        a, b = random.sample(replicas, 2) if len(replicas) > 1 else (replicas[0], replicas[0])
        token = fleet.token(a.keys.split(",")[0])
        stores = [
            StateStore(backend=HttpBackend(r.url, token=token, timeout=2, retry_window=0))
            for r in (a, b)
        ]
        scope = TaskScope(DAG, RUN, "ryw")
        try:
            n += 1
            # A key of its own: an earlier probe's write that timed out and was applied late
            # (a stopped replica resumed) cannot land on it.
            stores[0].task_state(scope).set(f"ryw:{n}", n)
            if stores[1].task_state(scope).get(f"ryw:{n}") != n:
                counts["violations"] += 1
            counts["probes"] += 1
        except TaskStateError:
            pass  # one of the two is down (a fault): not a probe
        finally:
            for s in stores:
                s.close()
        stop.wait(0.2)


def check(fleet: Fleet, report: RunReport) -> list[str]:
    """The invariants, read from PostgreSQL directly; the broken ones, as sentences.

    No allowance for lost answers: a conditional write (`update`, `compare_and_set`) whose
    answer a fault lost is re-sent by the client with its write id, and the servers' write
    ledger answers it with the first outcome, so the counter equals the acknowledged updates
    exactly and no error reaches a worker unless an outage outlasts the retry window.
    """
    from taskstate import StateStore, TaskScope

    problems: list[str] = []
    with StateStore(fleet.postgres.url) as store:
        shared = store.task_state(TaskScope(DAG, report.run, SHARED))
        for w in report.workers:
            mine = store.task_state(TaskScope(DAG, report.run, w.worker_id))
            cursor = mine.get(CURSOR, default=0)
            if cursor != w.records:
                problems.append(
                    f"{w.worker_id}: cursor {cursor} in PostgreSQL, {w.records} acknowledged"
                )
            if w.stale_reads:
                problems.append(f"{w.worker_id}: read its own write stale: {w.stale_reads[:3]}")
        acked = sum(w.updates for w in report.workers)
        unknown = sum(w.unknown_updates for w in report.workers)
        counter = shared.get(COUNTER, default=0)
        if counter != acked:
            problems.append(
                f"counter {counter} in PostgreSQL, {acked} updates acknowledged and {unknown} "
                f"unknown ({'an increment applied twice' if counter > acked else 'one lost'})"
            )
        rounds = sorted({r for w in report.workers for r in w.rounds})
        for r in rounds:
            holders = [w.worker_id for w in report.workers if r in w.leases]
            stored = shared.get(f"lease:{r}")
            if len(holders) != 1 or stored != holders[0]:
                problems.append(f"lease round {r}: stored {stored!r}, believed held by {holders}")
    if report.ryw["violations"]:
        problems.append(f"{report.ryw['violations']} stale reads across replicas")
    for w in report.workers:
        for at, _end, op, kind, message in w.errors:
            if _past_window(at, report.faults):
                continue
            problems.append(f"{w.worker_id} {op} at {at:.1f}: {kind}: {message}")
    return problems


def unknown_outcomes(report: RunReport) -> dict[str, int]:
    """Writes that ended as OutcomeUnknownError (none should: `check` counts each as a
    problem), by the last fault injected before the call ended."""
    counts: dict[str, int] = {}
    for w in report.workers:
        for _at, end, _op, kind, _ in w.errors:
            if kind == "OutcomeUnknownError":
                before = [f for f in report.faults if f.start <= end]
                where = before[-1].kind if before else "no fault"
                counts[where] = counts.get(where, 0) + 1
    return counts


def _past_window(at: float, faults: list[Fault]) -> bool:
    """An error may reach a worker when its call started in an outage longer than the retry
    window (none of the injected faults lasts that long). A key rotation is no outage (no
    request is refused), however long the workers take to pick up the new token."""
    return any(
        f.kind != "rotate_key" and f.recovered - f.start > RETRY_WINDOW
        and f.start <= at <= f.recovered
        for f in faults
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fleet")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a fleet and keep it running until interrupted")
    up.add_argument("--replicas", type=int, default=2)
    up.add_argument("--serve-workers", type=int, default=1)
    worker = sub.add_parser("worker", help="(internal) one worker's checkpoint loop")
    worker.add_argument("spec")
    args = parser.parse_args()
    if args.command == "worker":
        raw = json.loads(args.spec)
        raw["token_file"], raw["out"] = Path(raw["token_file"]), Path(raw["out"])
        run_worker(WorkerSpec(**raw))
        return
    with running_fleet(replicas=args.replicas, serve_workers=args.serve_workers) as fleet:
        assert fleet.bouncer is not None and fleet.haproxy is not None
        print(f"postgresql: {fleet.postgres.url}")
        print(f"pgbouncer:  {fleet.bouncer.url}")
        for r in fleet.replicas:
            print(f"replica {r.name}: {r.url}")
        print(f"haproxy:    {fleet.url}  (config {fleet.root / 'haproxy.cfg'})")
        print(f"pool token: {fleet.token(secret('old'))}")
        print("Ctrl-C stops everything.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
