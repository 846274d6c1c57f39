"""Point reads, listings, discovery, cleanup and migration at the size of a real Airflow estate,
on SQLite and PostgreSQL (issue 22). Not in CI; starts its own PostgreSQL server.

Stores are built with bulk SQL (SQLite `executemany` in 100,000-row transactions, PostgreSQL
`COPY`), never through accessors, and kept as templates (a file copy / `CREATE DATABASE ...
TEMPLATE`), so destructive runs (cleanup, migration) start from a fresh copy. Every store has the
same shape: DAGs of 20 runs x 50 task instances (the last 10 are map indices 0-9 of one mapped
task) x 3 keys; 10% of rows expired; 1% of rows hold offload references (with their objects);
one 20,000-key task instance and one 1-key task instance; 200 assets.

Measured, sides interleaved in one process, with the load average printed:
- get / set / entry p50 on each store, as ratios to the smallest;
- the first page (50) of the 20,000-key task instance against the 1-key one, same store;
- discovery first pages (DAGs, a DAG's runs, a run's task instances, assets), against a store
  holding one task instance;
- cleanup of the expired rows while a writer process sets task state: its worst `set`;
- peak RSS of `taskstate clean` with offloading (a subprocess; ru_maxrss);
- PostgreSQL: the online migration (schema 4's index built CONCURRENTLY) on the largest store
  while a writer runs: its worst `set`; on both backends, the count catalog's step (its
  triggers, then every DAG's rows counted) run again the same way;
- over the HTTP API (the app `taskstate serve` runs, under uvicorn on loopback in a thread of
  this process): one key and the first page of the 20,000-key task instance against the 1-key
  one, and `/dags?limit=50` against the one-task-instance store, beside the same calls made
  on the store (the two levels side by side; the store-level figures above are unchanged).

`--pg-settings production` starts the PostgreSQL server with production-sized settings
(tests/postgres_server.py `server_settings`) instead of the test suite's; every store of a run
is on the same server, so the ratios compare like with like. `--prewarm` loads every copy's
tables and indexes into `shared_buffers` (`pg_prewarm`) before the timed rounds: a store in
service, not one just copied. `--pg-set NAME=VALUE` adds a setting to the profile's;
`--pg-statements` reports, per store, what the server did for each point statement
(`pg_stat_statements`: time, buffers, WAL). `--parts` runs some of the measurements only.
`--cleaned` measures discovery and the HTTP figures again once `clean` has deleted the
stores' expired rows (10% of them, never cleaned as built).

    .venv/bin/python bench/scale.py [--sizes 10000,1000000] [--backends sqlite,postgres]
        [--pg-settings test|production] [--prewarm] [--pg-statements] [--pg-set NAME=VALUE]
        [--parts point,pages,discovery,http,cleanup,clean,migration] [--cleaned]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing as mp
import os
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from record import meta, save
from tests.expired_rows import load_rows
from tests.postgres_server import PROFILES, running_server

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.backends import postgres as pg
from taskstate.backends import sqlite as lite
from taskstate.backends.objects import digest
from taskstate.settings import Settings
from taskstate.stored import REF_PREFIX

PARTS = ("point", "pages", "discovery", "http", "cleanup", "clean", "migration")
NOW = time.time()
RUNS, TIS, KEYS = 20, 50, 3  # per DAG, per run, per task instance
BIG = TaskScope("big_dag", "run", "big_task")
SMALL = TaskScope("big_dag", "run", "small_task")
BIG_KEYS = 20_000


def scope_of(i: int) -> tuple[TaskScope, str]:
    """Row i of the generic rows: its scope and key (so keys are sampled without a list)."""
    ti, k = divmod(i, KEYS)
    dag, rest = divmod(ti, RUNS * TIS)
    run, t = divmod(rest, TIS)
    scope = (
        TaskScope(f"dag_{dag:05}", f"scheduled__{run:03}", f"task_{t:02}")
        if t < TIS - 10
        else TaskScope(f"dag_{dag:05}", f"scheduled__{run:03}", "mapped", t - (TIS - 10))
    )
    return scope, f"key_{k}"


def rows(n: int, objects: Path | None) -> Iterator[tuple[str, str, str, float | None, float]]:
    for i in range(n):
        scope, key = scope_of(i)
        value = '{"offset": 12345, "note": "a typical small value"}'
        if i % 100 == 50 and objects is not None:  # 1%: an offloaded value
            ref = f"{digest(scope.namespace)}/{digest(key)}/{digest(value)}-{uuid.uuid4().hex[:16]}"
            path = objects / ref
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)
            value = REF_PREFIX + ref
        expires = NOW - 60 if i % 10 == 7 else NOW + 30 * 86400
        yield scope.namespace, key, value, expires, NOW - 60
    for k in range(BIG_KEYS):
        yield BIG.namespace, f"key_{k:05}", "1", NOW + 86400, NOW - 60
    yield SMALL.namespace, "key_0", "1", NOW + 86400, NOW - 60
    for a in range(200):
        yield AssetScope(name=f"asset_{a:03}").namespace, "watermark", "1", None, NOW - 60


def build_sqlite(path: Path, n: int, objects: Path | None) -> float:
    started = time.perf_counter()
    url = f"sqlite:///{path}"
    lite.SQLiteBackend(url).schema_status()  # creates the schema
    load_rows(url, rows(n, objects))  # executemany in 100,000-row transactions
    return time.perf_counter() - started


def build_postgres(url: str, n: int, objects: Path | None) -> float:
    started = time.perf_counter()
    pg.PostgresBackend(url).migrate()
    load_rows(url, rows(n, objects))  # COPY
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {pg.TABLE}")
    return time.perf_counter() - started


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def worst(values: list[float]) -> float:
    return max(values) if values else float("nan")


def timed(fn: Callable[[], object], times: list[float]) -> None:
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)


def point_ops(
    stores: dict[str, tuple[StateStore, int]],
    rounds: int,
    cpu: dict[str, float] | None = None,
    server_cpu: dict[str, Callable[[], tuple[float, int]]] | None = None,
) -> dict[str, Any]:
    """get/set/entry p50 per store, interleaved: each round runs 50 of each on every store,
    one operation per store in turn (a burst of load hits every store alike). With `cpu`, it
    also gets the mean CPU time per operation in µs, wall clock aside: this thread's (`client
    <store> <op>`) and, for the stores in `server_cpu` (a reading of the CPU its database's
    server processes have used, and their minor page faults), the server's (`server <store>
    <op>`, and `faults <store> <op>` per operation)."""
    times: dict[tuple[str, str], list[float]] = {}
    client: dict[tuple[str, str], float] = {}
    server: dict[tuple[str, str], float] = {}
    faults: dict[tuple[str, str], int] = {}
    rng = random.Random(7)
    for _ in range(rounds):
        for op in ("get", "set", "entry"):
            before = {name: read() for name, read in (server_cpu or {}).items()}
            for _ in range(50):
                for name, (store, n) in stores.items():
                    i = rng.randrange(n)
                    i -= i % 100 == 50  # not an offloaded row (no worker backend here)
                    scope, key = scope_of(i)
                    state = store.task_state(scope)
                    fn: Callable[[], object] = {
                        "get": lambda s=state, k=key: s.get(k),
                        "set": lambda s=state, k=key: s.set(k, {"offset": 1}),
                        "entry": lambda s=state, k=key: s.entry(k),
                    }[op]
                    c0 = time.thread_time()
                    timed(fn, times.setdefault((name, op), []))
                    client[name, op] = client.get((name, op), 0.0) + time.thread_time() - c0
            for name, read in (server_cpu or {}).items():
                used, faulted = read()
                server[name, op] = server.get((name, op), 0.0) + used - before[name][0]
                faults[name, op] = faults.get((name, op), 0) + faulted - before[name][1]
    if cpu is not None:
        calls = rounds * 50
        for (name, op), used in client.items():
            cpu[f"client {name} {op}"] = used / calls * 1e6
        for (name, op), used in server.items():
            cpu[f"server {name} {op}"] = used / calls * 1e6
            cpu[f"faults {name} {op}"] = faults[name, op] / calls
    return {f"{name} {op}": p50(t) * 1000 for (name, op), t in times.items()}


def database_cpu(admin: psycopg.Connection[Any], dbname: str) -> Callable[[], tuple[float, int]]:
    """A reading of the CPU seconds the server processes connected to `dbname` have used
    (/proc/<pid>/schedstat, ns; the processes are on this machine), and of their minor page
    faults (a process's first touch of a page of `shared_buffers` is one)."""

    def read() -> tuple[float, int]:
        pids = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (dbname,)
        ).fetchall()
        used = faulted = 0
        for (pid,) in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):  # exited since
                used += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
                faulted += int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])
        return used / 1e9, faulted

    return read


def pages(store: StateStore, rounds: int) -> dict[str, float]:
    """First page of the 20,000-key task instance against the 1-key one, interleaved."""
    big, small = store.task_state(BIG), store.task_state(SMALL)
    tb: list[float] = []
    ts: list[float] = []
    te: list[float] = []
    for _ in range(rounds):
        timed(lambda: big.page(limit=50), tb)
        timed(lambda: small.page(limit=50), ts)
        timed(lambda: big.page(limit=50, exact_total=True), te)
    return {
        "20000-key first page ms": p50(tb) * 1000,
        "1-key first page ms": p50(ts) * 1000,
        "20000-key first page with exact_total ms": p50(te) * 1000,
    }


def discovery(stores: dict[str, StateStore], rounds: int) -> dict[str, float]:
    """Discovery first pages (what the API's routes call), interleaved: each page on every
    store in turn."""
    times: dict[tuple[str, str], list[float]] = {}
    calls: dict[str, list[tuple[str, Callable[[], object]]]] = {}
    for name, store in stores.items():
        d = store.discovery()
        dag = d.dags(limit=50).items[-1][0]  # a generic DAG where there are any
        run = d.runs(dag, limit=50).items[0][0]
        calls[name] = [
            ("dags", lambda d=d: d.dags(limit=50)),
            ("runs", lambda d=d, dag=dag: d.runs(dag, limit=50)),
            ("task instances", lambda d=d, g=dag, r=run: d.task_instances(g, r, limit=50)),
            ("assets", lambda d=d: d.assets(limit=50)),
        ]
    for _ in range(rounds):
        for i in range(4):
            for name in stores:
                what, fn = calls[name][i]
                timed(fn, times.setdefault((name, what), []))
    return {f"{name} {what} ms": p50(t) * 1000 for (name, what), t in times.items()}


def http_api(big: StateStore, tiny: StateStore, rounds: int) -> dict[str, float]:
    """The issue's HTTP figures, and the same calls on the store, interleaved: one key of the
    1-key and of the 20,000-key task instance, their first pages (50), on `big`; `/dags`
    (limit 50) on `big` and on `tiny` (one task instance). The app is `taskstate serve`'s
    (`standalone_app`, open on loopback), one uvicorn per store in a thread of this process; the
    client is one keep-alive `http.client` connection per server, in this process too, so each
    HTTP figure includes the client's parsing and the server's, GIL shared."""
    from tests.api.server import running

    from taskstate.api.serve import standalone_app

    task = "/taskstate/api/v2/dags/big_dag/dagRuns/run/taskInstances/{}/state-store"
    big_ti, small_ti = big.task_state(BIG), big.task_state(SMALL)
    rng = random.Random(11)
    times: dict[str, list[float]] = {}
    with (
        running(standalone_app(big, None)) as on_big,
        running(standalone_app(tiny, None)) as on_tiny,
    ):
        conns = {
            base: http.client.HTTPConnection(base.removeprefix("http://"), timeout=60)
            for base in (on_big, on_tiny)
        }

        def fetch(base: str, path: str) -> None:
            conn = conns[base]
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"GET {path}: {answer.status}")

        def big_key() -> str:
            return f"key_{rng.randrange(BIG_KEYS):05}"

        calls: list[tuple[str, Callable[[], object]]] = [
            ("HTTP one key, 1-key TI", lambda: fetch(on_big, task.format("small_task") + "/key_0")),
            ("store one key, 1-key TI", lambda: small_ti.entry("key_0")),
            ("HTTP one key, 20000-key TI",
             lambda: fetch(on_big, task.format("big_task") + "/" + big_key())),
            ("store one key, 20000-key TI", lambda: big_ti.entry(big_key())),
            ("HTTP first page, 1-key TI", lambda: fetch(on_big, task.format("small_task"))),
            ("store first page, 1-key TI", lambda: small_ti.page(limit=50)),
            ("HTTP first page, 20000-key TI", lambda: fetch(on_big, task.format("big_task"))),
            ("store first page, 20000-key TI", lambda: big_ti.page(limit=50)),
            ("HTTP /dags, one-TI store", lambda: fetch(on_tiny, "/taskstate/api/v2/dags?limit=50")),
            ("store /dags, one-TI store", lambda: tiny.discovery().dags(limit=50)),
            ("HTTP /dags, largest store", lambda: fetch(on_big, "/taskstate/api/v2/dags?limit=50")),
            ("store /dags, largest store", lambda: big.discovery().dags(limit=50)),
        ]  # fmt: skip
        for _, fn in calls:  # once each, untimed: connections open, caches warm
            fn()
        for _ in range(rounds):  # in a new order each round: no call always follows /dags
            rng.shuffle(calls)
            for what, fn in calls:
                timed(fn, times.setdefault(what, []))
        for conn in conns.values():
            conn.close()
    out = {f"{what} ms": p50(t) * 1000 for what, t in times.items()}
    for level in ("HTTP", "store"):
        out[f"{level} one key ratio 20000-key/1-key TI"] = (
            out[f"{level} one key, 20000-key TI ms"] / out[f"{level} one key, 1-key TI ms"]
        )
        out[f"{level} first page ratio 20000-key/1-key TI"] = (
            out[f"{level} first page, 20000-key TI ms"] / out[f"{level} first page, 1-key TI ms"]
        )
        out[f"{level} /dags ratio largest/one-TI store"] = (
            out[f"{level} /dags, largest store ms"] / out[f"{level} /dags, one-TI store ms"]
        )
    return out


def prewarm(url: str) -> str:
    """Every table and index of a PostgreSQL store read into `shared_buffers` (`pg_prewarm`,
    PostgreSQL's contrib; as much as fits): what the buffers hold once the store has served a
    while. Says how many pages were read."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        row = conn.execute(
            "SELECT sum(pg_prewarm(c.oid)) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
        ).fetchone()
    return f"{row[0] if row else 0} pages"


STATEMENTS = {"shared_preload_libraries": "pg_stat_statements"}


def statement_costs(url: str) -> dict[str, float]:
    """Per statement this store's database ran since the last reset, called 100 times or more
    (pg_stat_statements, by database): the server's mean execution time (µs), buffers hit and
    read, WAL full-page images and WAL bytes, each per call."""
    out: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 48), calls, mean_exec_time,"
            " shared_blks_hit, shared_blks_read, wal_fpi, wal_bytes FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND calls >= 100 ORDER BY calls DESC"
        ).fetchall()
    for query, calls, mean_ms, hit, read, fpi, wal in found:
        out[f"{query} | us"] = round(mean_ms * 1000, 1)
        out[f"{query} | hit"] = round(hit / calls, 2)
        out[f"{query} | read"] = round(read / calls, 2)
        out[f"{query} | fpi"] = round(fpi / calls, 2)
        out[f"{query} | wal bytes"] = round(float(wal) / calls)
    return out


def writer(url: str, ready: Event, stop: Event, out: Connection) -> None:
    """Set task state in a loop until told to stop; send (wall-clock start, latency) of each."""
    samples: list[tuple[float, float]] = []
    with StateStore(url, settings=Settings()) as store:
        state = store.task_state(TaskScope("writer_dag", "run", "task"))
        state.set("first", 0)  # connected (and the schema checked) before `ready`
        ready.set()
        i = 0
        while not stop.is_set():
            at, t0 = time.time(), time.perf_counter()
            state.set(f"k{i % 100}", {"i": i})
            samples.append((at, time.perf_counter() - t0))
            i += 1
    out.send(samples)


def start_writer(url: str) -> tuple[mp.process.BaseProcess, Event, Connection]:
    """A `writer` process, connected and writing: (the process, its stop event, where it sends
    its samples once stopped)."""
    ctx = mp.get_context("spawn")
    ready, stop, (receive, send) = ctx.Event(), ctx.Event(), ctx.Pipe(duplex=False)
    proc = ctx.Process(target=writer, args=(url, ready, stop, send))
    proc.start()
    if not ready.wait(120):
        proc.kill()
        raise RuntimeError("the writer process did not start")
    return proc, stop, receive


def while_writing(
    url: str, work: Callable[[], object], prepare: Callable[[], object] = lambda: None
) -> tuple[float, float, float, float, float]:
    """Run `work` while a writer process sets task state (`prepare` first, outside the
    window): (work s, the writer's worst and p50 set ms among the sets started during it,
    its worst set in the 10 s before, alone: the control at this load, and its p99 set ms
    during the work: less at the mercy of one descheduling than the worst)."""
    proc, stop, receive = start_writer(url)
    time.sleep(1.0)
    alone = time.time()
    time.sleep(10.0)
    alone_end = time.time()
    prepare()
    time.sleep(0.5)
    begin, t0 = time.time(), time.perf_counter()
    work()
    took, end = time.perf_counter() - t0, time.time()
    time.sleep(0.5)
    stop.set()
    samples = receive.recv()
    proc.join()
    during = [latency for at, latency in samples if begin <= at <= end]
    control = [latency for at, latency in samples if alone <= at <= alone_end]
    p99 = sorted(during)[int(len(during) * 0.99)] if during else float("nan")
    return took, worst(during) * 1000, p50(during) * 1000, worst(control) * 1000, p99 * 1000


def clean_rss(url: str, objects: Path) -> tuple[float, str]:
    """Peak RSS (MB) of `taskstate clean` with offloading, as a subprocess."""
    env = {
        **os.environ,
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.backends.offload.OffloadBackend",
        "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL": f"file://{objects}",
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "--url", url, "clean", "--json"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(before, after) / 1024, proc.stdout.strip() or proc.stderr.strip()[-300:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--out", default="scale", help="results file name (bench/results/<out>.json)"
    )
    parser.add_argument(
        "--work",
        default=None,
        help="where the template stores are built and KEPT for the next run (a SQLite file "
        "and a PostgreSQL cluster per size; default: a temporary directory, deleted)",
    )
    parser.add_argument("--build-only", action="store_true", help="build the templates, stop")
    parser.add_argument(
        "--pg-settings",
        default="test",
        choices=PROFILES,
        help="the PostgreSQL server's settings: the test suite's (default) or production-sized "
        "(tests/postgres_server.py server_settings)",
    )
    parser.add_argument(
        "--prewarm",
        action="store_true",
        help="PostgreSQL: read every copy's tables and indexes into shared_buffers first",
    )
    parser.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="PostgreSQL: a setting added to the profile's (repeatable), e.g. wal_compression=lz4",
    )
    parser.add_argument(
        "--pg-statements",
        action="store_true",
        help="PostgreSQL: load pg_stat_statements and report, per store, the server's time, "
        "buffers and WAL of each statement the point operations ran",
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which measurements (of {','.join(PARTS)})"
    )
    parser.add_argument(
        "--without-index",
        default="",
        metavar="NAME",
        help="PostgreSQL, point: also a copy of the largest store with this index dropped (x<N>)",
    )
    parser.add_argument(
        "--wall-clock",
        action="store_true",
        help="point: the stores' clock is the wall clock, so each `set` expires after the last "
        "(default: stopped at the build's instant, where every row's expiry is)",
    )
    parser.add_argument(
        "--cleaned",
        action="store_true",
        help="discovery and http: measured again once `clean` deleted the expired rows (10%%)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        parser.error(f"unknown parts: {sorted(parts - set(PARTS))}")
    sizes = [int(s) for s in args.sizes.split(",")]
    started = meta()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    figures: dict[str, Any] = {
        "sizes": sizes,
        "shape": f"{RUNS} runs x {TIS} TIs x {KEYS} keys",
        "pg settings": args.pg_settings,
        "prewarm": args.prewarm,
        "pg statements": args.pg_statements,
        "pg set": args.pg_set,
        "cleaned": args.cleaned,
        "without index": args.without_index,
        "wall clock": args.wall_clock,
        "parts": sorted(parts),
    }
    keep = args.work is not None
    work = Path(args.work) if keep else Path(tempfile.mkdtemp(prefix="taskstate-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for kind in args.backends.split(","):
            figures[kind] = run(
                kind,
                sizes,
                work,
                args.rounds,
                build_only=args.build_only,
                profile=args.pg_settings,
                warm=args.prewarm,
                parts=parts,
                statements=args.pg_statements,
                pg_set=dict(setting.split("=", 1) for setting in args.pg_set),
                cleaned=args.cleaned,
                without_index=args.without_index if kind == "postgres" else "",
                wall_clock=args.wall_clock,
            )
            print(figures[kind], flush=True)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    figures["load_end"] = os.getloadavg()
    if not args.build_only:
        save(args.out, figures, command=" ".join(sys.argv), started=started)


def run(
    kind: str,
    sizes: list[int],
    work: Path,
    rounds: int,
    *,
    build_only: bool = False,
    profile: str = "test",
    warm: bool = False,
    parts: set[str] = set(PARTS),  # noqa: B006 (never modified)
    statements: bool = False,
    pg_set: dict[str, str] | None = None,
    cleaned: bool = False,
    without_index: str = "",
    wall_clock: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    extra = {**(STATEMENTS if statements else {}), **(pg_set or {})}
    server_cm = (
        running_server(root=work / "pg", profile=profile, extra=extra)
        if kind == "postgres"
        else None
    )
    server = server_cm.__enter__() if server_cm else None
    scratch: list[str] = []  # copies made by this run, dropped at the end
    try:
        urls: dict[str, str] = {}
        templates: dict[str, str] = {}
        largest = max(sizes)
        if server is not None:  # copies an interrupted run left in the kept cluster
            with psycopg.connect(server.url, autocommit=True) as admin:
                out["server settings"] = {  # as the server runs them
                    name: admin.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                    for name in (*server.settings, "fsync", "full_page_writes", "wal_compression")
                }
                print(f"{kind}: {out['server settings']}", flush=True)
                names = admin.execute("SELECT datname FROM pg_database WHERE datname ~ '_copy_'")
                for (leftover,) in names.fetchall():
                    admin.execute(f"DROP DATABASE {leftover} WITH (FORCE)")
        for n in [0, *sizes]:
            name = f"s{n}"
            built = work / f"built-{kind}-{name}"  # written once the template is complete
            if kind == "sqlite":
                path = work / f"{name}.db"
                templates[name] = str(path)
                urls[name] = f"sqlite:///{path}"
            else:
                assert server is not None
                urls[name] = server.url.rsplit("/", 1)[0] + "/" + name
                templates[name] = name
            total = n + BIG_KEYS + 1 + 200
            if built.exists():
                print(f"{kind}: template {name} ({total} rows): {built.read_text()}", flush=True)
                out[f"build {name} ({total} rows) s"] = float(built.read_text().split()[0])
                # Brought to this checkout's schema (an online step on a 10 M-row template).
                t0 = time.perf_counter()
                backend = lite.SQLiteBackend(urls[name]) if kind == "sqlite" else None
                if kind == "sqlite":
                    assert backend is not None
                    backend.schema_status()
                    backend.close()
                else:
                    b = pg.PostgresBackend(urls[name])
                    b.migrate()
                    b.close()
                print(f"{kind}: {name} migrated in {time.perf_counter() - t0:.1f}s", flush=True)
                continue
            objects = work / f"{kind}-objects-{name}"
            shutil.rmtree(objects, ignore_errors=True)
            if kind == "sqlite":
                Path(templates[name]).unlink(missing_ok=True)
                took = build_sqlite(Path(templates[name]), n, objects)
            else:
                assert server is not None
                with psycopg.connect(server.url, autocommit=True) as admin:
                    admin.execute(f"DROP DATABASE IF EXISTS {name}")
                    admin.execute(f"CREATE DATABASE {name}")
                took = build_postgres(urls[name], n, objects)
            built.write_text(f"{took:.1f} s, load {os.getloadavg()[0]:.1f}\n")
            out[f"build {name} ({total} rows) s"] = round(took, 1)
            print(f"{kind}: built {name}: {total} rows in {took:.1f}s", flush=True)
        if build_only:
            return out
        objects = work / f"{kind}-objects-s{largest}"

        def copy(name: str) -> str:
            """A fresh copy of a template store; its URL (dropped by `drop` or at the end)."""
            fresh = f"{name}_copy_{uuid.uuid4().hex[:6]}"
            if kind == "sqlite":
                target = work / f"{fresh}.db"
                shutil.copyfile(templates[name], target)
                url = f"sqlite:///{target}"
            else:
                assert server is not None
                with psycopg.connect(server.url, autocommit=True) as admin:
                    # FILE_COPY (PostgreSQL 15+): the default since 15 writes the whole copy to
                    # the WAL, and checkpoints of it would land in the timed windows.
                    admin.execute(
                        f"CREATE DATABASE {fresh} TEMPLATE {templates[name]} STRATEGY FILE_COPY"
                    )
                url = server.url.rsplit("/", 1)[0] + "/" + fresh
                if warm:
                    print(f"{kind}: {name} prewarmed: {prewarm(url)}", flush=True)
                if statements:
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            scratch.append(url)
            return url

        def drop(url: str) -> None:
            """Remove a copy (the disk holds a few 10 M-row stores, not a dozen)."""
            scratch.remove(url)
            if kind == "sqlite":
                for suffix in ("", "-wal", "-shm"):
                    Path(lite.path_from_url(url).as_posix() + suffix).unlink(missing_ok=True)
                return
            assert server is not None
            with psycopg.connect(server.url, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

        def loaded(part: str) -> bool:
            """Whether `part` runs; if so, the load now is kept with its figures."""
            if part in parts:
                out[f"load at {part}"] = [round(x, 2) for x in os.getloadavg()]
            return part in parts

        if parts & {"point", "pages", "discovery", "http"}:
            in_store = sizes if "point" in parts else [largest]
            copies = {f"s{n}": copy(f"s{n}") for n in in_store}
            if without_index and "point" in parts:  # x<N>: the largest store less that index
                copies[f"x{largest}"] = copy(f"s{largest}")
                with psycopg.connect(copies[f"x{largest}"], autocommit=True) as conn:
                    conn.execute(f"DROP INDEX {without_index}")
            # The bench stores' rows all expire at one instant; a clock stopped at NOW puts each
            # `set`'s expiry there too, so an index ordered by expiry takes it among those equal
            # keys (in heap order: a random leaf). --wall-clock: later each time, as in service.
            clock: Callable[[], float] = time.time if wall_clock else lambda: NOW
            stores = {k: StateStore(u, settings=Settings(), clock=clock) for k, u in copies.items()}
            tiny = StateStore(copy("s0"), settings=Settings(), clock=lambda: NOW)
            big = stores[f"s{largest}"]
            if loaded("point"):
                # The first round warms the caches (a copy is cold: PostgreSQL's shared_buffers
                # hold none of it unless --prewarm) and is reported apart; the p50s and ratios
                # are of the rounds after it.
                cold = point_ops({k: (s, int(k[1:])) for k, s in stores.items()}, 1)
                if statements:  # from here on: the timed rounds only
                    with psycopg.connect(copies[f"s{largest}"], autocommit=True) as conn:
                        conn.execute("SELECT pg_stat_statements_reset()")
                cpu: dict[str, float] = {}
                readers: dict[str, Callable[[], tuple[float, int]]] = {}
                admin = psycopg.connect(server.url, autocommit=True) if server else None
                if admin is not None:
                    readers = {
                        k: database_cpu(admin, u.rsplit("/", 1)[1]) for k, u in copies.items()
                    }
                ops = point_ops(
                    {k: (s, int(k[1:])) for k, s in stores.items()}, rounds, cpu, readers
                )
                if admin is not None:
                    admin.close()
                for key, value in cpu.items():
                    where, name, op = key.split(" ")
                    what = "minor faults/op" if where == "faults" else f"{where} CPU us/op"
                    out[f"{op} {what} {name}"] = round(value, 1)
                if statements:
                    for k, u in copies.items():
                        costs = statement_costs(u)
                        out.update({f"server {k} {what}": v for what, v in costs.items()})
                smallest = f"s{min(sizes)}"
                for key, value in ops.items():
                    name, op = key.split(" ")
                    out[f"{op} p50 ms {name}"] = round(value, 3)
                    ratio = value / ops[f"{smallest} {op}"]
                    out[f"{op} p50 ratio {name}/{smallest}"] = round(ratio, 2)
                    out[f"{op} cold first-round p50 ms {name}"] = round(cold[key], 3)
            if loaded("pages"):
                pg_ = pages(big, rounds * 20)
                out.update({k: round(v, 3) for k, v in pg_.items()})
                out["first page ratio 20000-key/1-key"] = round(
                    pg_["20000-key first page ms"] / pg_["1-key first page ms"], 2
                )
            # The one-task-instance store: a copy of s0 (assets, the big and small TIs) trimmed.
            tiny.backend.clear_prefix(BIG.namespace)
            # As built (10% of rows expired, never cleaned); with --cleaned, again once `clean`
            # has deleted them (a store in service: `/dags` subtracts the expired rows not yet
            # cleaned from its count catalog, docs/backends.md "Key counts of /dags").
            for phase in ("", "cleaned: ") if cleaned else ("",):
                if phase:
                    t0 = time.perf_counter()
                    big.cleanup(batch_size=100_000)
                    out["cleaned: clean s"] = round(time.perf_counter() - t0, 1)
                if loaded("discovery"):
                    found = discovery({"one-TI": tiny, f"s{largest}": big}, rounds * 4)
                    for key, value in found.items():
                        out[phase + key] = round(value, 2)
                    for what in ("dags", "runs", "task instances", "assets"):
                        out[f"{phase}discovery {what} ratio s{largest}/one-TI"] = round(
                            found[f"s{largest} {what} ms"] / found[f"one-TI {what} ms"], 2
                        )
                if loaded("http"):
                    over_http = http_api(big, tiny, rounds * 20)
                    out.update({phase + k: round(v, 3) for k, v in over_http.items()})
            for s in (*stores.values(), tiny):
                s.close()
            for url in list(scratch):
                drop(url)
            print(out, flush=True)
        if loaded("cleanup"):  # the expired rows (10%) deleted while a writer sets task state
            url = copy(f"s{largest}")
            checkpoints = (
                "SELECT checkpoints_req, checkpoints_timed, pg_current_wal_lsn() "
                "FROM pg_stat_bgwriter"
            )
            if kind == "postgres":
                with psycopg.connect(url, autocommit=True) as conn:
                    before = conn.execute(checkpoints).fetchone()
            with StateStore(url, settings=Settings()) as store:
                took, worst_ms, p50_ms, alone_ms, p99_ms = while_writing(
                    url, lambda: store.cleanup(batch_size=10_000)
                )
            if kind == "postgres":  # during the whole window (the writer alone included)
                with psycopg.connect(url, autocommit=True) as conn:
                    after = conn.execute(checkpoints).fetchone()
                    assert before is not None and after is not None
                    wal = conn.execute(
                        "SELECT pg_wal_lsn_diff(%s, %s)", (after[2], before[2])
                    ).fetchone()
                out["cleanup window checkpoints forced by WAL"] = after[0] - before[0]
                out["cleanup window checkpoints timed"] = after[1] - before[1]
                out["cleanup window WAL GB"] = round(float(wal[0]) / 2**30, 2) if wal else None
            drop(url)
            out["cleanup s"] = round(took, 1)
            out["cleanup writer worst set ms"] = round(worst_ms, 1)
            out["cleanup writer p50 set ms"] = round(p50_ms, 2)
            out["cleanup writer p99 set ms"] = round(p99_ms, 2)
            out["cleanup writer worst set ms, alone before it"] = round(alone_ms, 1)
            out["load after cleanup"] = [round(x, 2) for x in os.getloadavg()]
            print(out, flush=True)
        if loaded("clean"):  # the objects as hard links: `clean` removes orphans, not theirs
            linked = work / f"{kind}-objects-run"
            shutil.rmtree(linked, ignore_errors=True)
            subprocess.run(["cp", "-al", str(objects), str(linked)], check=True)
            url = copy(f"s{largest}")
            rss, said = clean_rss(url, linked)
            drop(url)
            shutil.rmtree(linked, ignore_errors=True)
            out["clean with offloading peak RSS MB"] = round(rss, 1)
            out["clean with offloading said"] = said
        if kind == "postgres" and loaded("migration"):
            url = copy(f"s{largest}")
            # The last online steps (the newest indexes), built again while a writer runs.
            first = min(v for v in pg._ONLINE if v > 4)

            def unbuild() -> None:  # back before them (the writer is connected already)
                with psycopg.connect(url, autocommit=True) as conn:
                    for version, index in pg._ONLINE.items():
                        if version >= first:
                            conn.execute(f"DROP INDEX IF EXISTS {index}")  # a DROP step: gone
                    conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version >= {first}")

            backend = pg.PostgresBackend(url)
            took, worst_ms, p50_ms, alone_ms, _ = while_writing(url, backend.migrate, unbuild)
            backend.close()
            drop(url)
            out[f"migration {first}+ (CREATE INDEX CONCURRENTLY) s"] = round(took, 1)
            out["migration writer worst set ms"] = round(worst_ms, 1)
            out["migration writer p50 set ms"] = round(p50_ms, 2)
            out["migration writer worst set ms, alone before it"] = round(alone_ms, 1)
        if loaded("migration"):
            # The count catalog's step (its triggers, then every DAG's rows counted, a DAG or a
            # few per short transaction) run again on a copy while a writer runs.
            url = copy(f"s{largest}")
            module = pg if kind == "postgres" else lite
            step = module._FILLS_DAG_KEYS

            def uncount() -> None:  # back before the step
                drops = [f"DROP TRIGGER IF EXISTS {module.DAG_KEYS}_{event}" for event in
                         ("created", "deleted")]  # fmt: skip
                if kind == "postgres":
                    with psycopg.connect(url, autocommit=True) as conn:
                        for drop_trigger in drops:
                            conn.execute(f"{drop_trigger} ON {pg.TABLE}")
                        conn.execute(f"DROP TABLE {pg.DAG_KEYS}")
                        conn.execute(f"DELETE FROM {pg.VERSION_TABLE} WHERE version >= {step}")
                    return
                conn = sqlite3.connect(lite.path_from_url(url), isolation_level=None)
                for sql in (
                    *drops,
                    f"DROP TABLE {lite.DAG_KEYS}",
                    f"PRAGMA user_version = {step - 1}",
                ):
                    conn.execute(sql)
                conn.close()

            def recount() -> None:
                if kind == "postgres":
                    backend = pg.PostgresBackend(url)
                    backend.migrate()
                else:
                    backend = lite.SQLiteBackend(url)
                    backend.schema_status()  # opening the file migrates it
                backend.close()

            took, worst_ms, p50_ms, alone_ms, _ = while_writing(url, recount, uncount)
            drop(url)
            out["migration count catalog s"] = round(took, 1)
            out["migration count catalog writer worst set ms"] = round(worst_ms, 1)
            out["migration count catalog writer p50 set ms"] = round(p50_ms, 2)
            out["migration count catalog writer worst set ms, alone before it"] = round(alone_ms, 1)
        out["load after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        for url in list(scratch):
            drop(url)
        if server_cm is not None:
            server_cm.__exit__(None, None, None)
    return out


if __name__ == "__main__":
    main()
