"""`taskstate serve` vs the floor: a bare ASGI app doing the same SQLite statements under the
same uvicorn, measured interleaved in one run.

    .venv/bin/python bench/http_floor.py               # --n 2000 --clients 32 --seconds 10

Both servers are separate processes on loopback, one uvicorn worker each (same loop, same
HTTP parser, no access log), each on its own SQLite file in WAL mode with synchronous=NORMAL.
The bare app uses the store's own schema and SQL statements: `PUT` is the store's upsert (value,
expiry, write time, writer) and, with history on (the default, `[state_store]
taskstate_history_versions` read from the environment by both sides alike), the same version
append and trim in the same transaction; `GET` is the store's point read. JSON in and out with
the standard `json` module; it checks no token, no key rules, no value rules, no expiry.
`taskstate serve` runs with a secret key, so every request carries and verifies a task token.

Latency: PUT then GET of one task-state key over one keep-alive `http.client` connection per
server, the two servers interleaved request by request (load hits both alike). The gate
(issue 23): `taskstate serve`'s PUT and GET p50 <= 1.5x the bare app's. Throughput:
`--clients` keep-alive clients (asyncio streams, another process), mixed GET/PUT, each server
in turn, `--workers` as given to `taskstate serve`. Reported, not asserted; not run in CI.

`--access-log` adds a third side, interleaved with the others: `taskstate serve` as it runs by
default, writing an access line per request and an audit line per write (into a file), so the
log's cost is the ratio of two sides of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from http_ops import (
    Side,
    cpu_table,
    drive,
    free_port,
    latency,
    latency_table,
    ms,
    process,
    throughput,
)
from record import meta, save

from taskstate.settings import Settings

SECRET = "bench-http-floor-secret-0123456789abcdefgh"
VALUE = {"cursor": 0, "rows": list(range(10)), "note": "checkpoint"}
TASK_PATH = "/taskstate/api/v2/dags/ts_bench/dagRuns/r1/taskInstances/t/state-store"


def bare_app(path: str) -> Any:
    """The floor: raw ASGI, one SQLite connection, the store's own schema and statements (its
    upsert and, with history on as by default, the same version append in the same
    transaction; its point read), no checks."""
    from taskstate.backends import sqlite as sql
    from taskstate.store import StateStore

    store = StateStore(f"sqlite:///{path}")  # the settings `taskstate serve` reads
    store.migrate()
    keep = store.history
    store.close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")

    def put(namespace: str, key: str, value: str, now: float) -> None:
        writer = '{"kind":"api","subject":"bench"}'
        expires = now + 86400 * 30
        params = (namespace, key, value, expires, now, writer)
        if not keep:
            conn.execute(sql._SET, params)
            return
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql._SET, params)
        version = conn.execute(sql._NEXT_VERSION, (namespace, key)).fetchone()[0]
        conn.execute(sql._APPEND, (namespace, key, version, value, expires, now, writer, "set"))
        if version > keep:
            conn.execute(sql._TRIM, (namespace, key, version - keep))
        conn.execute("COMMIT")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        namespace, _, key = scope["path"].rpartition("/")
        if scope["method"] == "PUT":
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            put(namespace, key, json.dumps(json.loads(body)["value"], separators=(",", ":")),
                time.time())  # fmt: skip
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        row = conn.execute(sql._GET, (namespace, key)).fetchone()
        if row is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        out = json.dumps(
            {"key": key, "value": json.loads(row[0]), "expires_at": row[1],
             "updated_at": row[3], "last_updated_by": json.loads(row[2])}
        ).encode()  # fmt: skip
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def wait_up(port: int, path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status < 500:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"port {port} did not come up")


def start_taskstate(stack: ExitStack, tmp: Path, workers: int, *, logged: bool = False) -> Side:
    """`taskstate serve` without its access log; `logged`: with it (the default `--log-level
    info`: an access line per request, an audit line per write, into a file)."""
    port = free_port()
    env = {**os.environ, "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET,
           "AIRFLOW_HOME": str(tmp / "ts-home")}  # fmt: skip
    name = "ts-logged" if logged else "ts"
    args = [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{tmp}/{name}.db", "serve",
            "--port", str(port), "--log-level", "info" if logged else "warning"]  # fmt: skip
    if workers > 1:
        args += ["--workers", str(workers)]
    group = stack.enter_context(process(args, env, tmp / f"{name}-serve.log"))
    wait_up(port, "/taskstate/health/live")
    token = subprocess.run(
        [sys.executable, "-m", "taskstate", "token", "create", "--dag-id", "ts_bench",
         "--run-id", "r1", "--task-id", "t", "--map-index", "-1"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    label = "taskstate serve + access log" if logged else "taskstate serve"
    bearer = {"Authorization": f"Bearer {token}"}
    return Side(label, f"http://127.0.0.1:{port}{TASK_PATH}", bearer, group)


def start_bare(stack: ExitStack, tmp: Path) -> Side:
    port = free_port()
    code = (
        "import sys, uvicorn; sys.path.insert(0, sys.argv[1]); import http_floor; "
        "uvicorn.run(http_floor.bare_app(sys.argv[2]), host='127.0.0.1', port=int(sys.argv[3]), "
        "log_level='warning', access_log=False, server_header=False)"
    )
    here = str(Path(__file__).resolve().parent)
    args = [sys.executable, "-c", code, here, str(tmp / "bare.db"), str(port)]
    group = stack.enter_context(process(args, dict(os.environ), tmp / "bare.log"))
    wait_up(port, "/x/health")
    return Side("bare ASGI + SQLite", f"http://127.0.0.1:{port}/bare/ts_bench/r1/t", {}, group)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1, help="taskstate serve --workers")
    parser.add_argument("--n", type=int, default=2000, help="latency samples per op and side")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--access-log", action="store_true",
                        help="also taskstate serve with its access log, interleaved")  # fmt: skip
    for hidden in ("--path", "--headers"):  # the --drive child's arguments
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--drive", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        result = asyncio.run(drive(args.drive, args.path, json.loads(args.headers),
                                   args.clients, args.seconds))  # fmt: skip
        print(json.dumps(result))
        return 0

    started = meta()
    figures: dict[str, Any] = {"latency": {}, "throughput": {}, "workers": args.workers}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        sides = [start_bare(stack, Path(tmp)), start_taskstate(stack, Path(tmp), args.workers)]
        if args.access_log:
            sides.append(start_taskstate(stack, Path(tmp), args.workers, logged=True))
        print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); "
              f"history versions kept per key: {Settings.load().history_versions}")  # fmt: skip
        times = latency(sides, args.n, ("PUT", "GET"), warm=100)
        print(f"\nlatency: one keep-alive http.client connection per server, interleaved, "
              f"n={args.n} per op and side, one key (one row)")  # fmt: skip
        figures["latency"] = latency_table(times, ("PUT", "GET"))
        bare, ours = sides[:2]
        for op in ("PUT", "GET"):
            p50 = {side.name: statistics.median(times[side.name][op]) for side in sides}
            ratio = p50[ours.name] / p50[bare.name]
            figures[f"{op} p50 ratio"] = round(ratio, 2)
            verdict = "meets" if ratio <= 1.5 else "misses"
            print(f"{op} p50: taskstate serve / bare = {ratio:.2f}x ({verdict} the 1.5x gate)")
            if args.access_log:
                logged = p50[sides[2].name] / p50[ours.name]
                figures[f"{op} p50 access log"] = round(logged, 2)
                print(f"{op} p50: with the access log / without = {logged:.2f}x")
        cpu = figures["server cpu us"] = cpu_table(sides, args.n)
        for op in ("PUT", "GET"):
            ratio = cpu[ours.name][op] / cpu[bare.name][op]
            figures[f"{op} cpu ratio"] = round(ratio, 2)
            print(f"{op} server CPU: taskstate serve / bare = {ratio:.2f}x", end="")
            if args.access_log:
                logged = cpu[sides[2].name][op] / cpu[ours.name][op]
                figures[f"{op} cpu access log"] = round(logged, 2)
                print(f"; with the access log / without = {logged:.2f}x", end="")
            print()
        print(f"\nthroughput: {args.clients} keep-alive clients in another process, mixed "
              f"PUT/GET (one key per client), {args.seconds:g} s; taskstate serve "
              f"--workers {args.workers}")  # fmt: skip
        print("| server | req/s | errors | p50 | p99 |\n|---|---:|---:|---:|---:|")
        for side in sides:
            r = throughput(__file__, side.port, side.path, side.headers, args.clients, args.seconds)
            figures["throughput"][side.name] = r
            cells = [f"{r['rps']:.0f}", str(r["errors"]), ms(r["p50"]), ms(r["p99"])]
            print(f"| {side.name} | {' | '.join(cells)} |")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    command = (f"bench/http_floor.py --n {args.n} --clients {args.clients} "
               f"--seconds {args.seconds:g} --workers {args.workers}"
               + (" --access-log" if args.access_log else ""))  # fmt: skip
    name = "http_floor" if args.workers == 1 else f"http_floor_workers{args.workers}"
    name += "_access_log" if args.access_log else ""
    save(name, figures, command=command, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
