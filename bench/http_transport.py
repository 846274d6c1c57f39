"""Client transports for the HTTP store, measured in one process, interleaved request by request.

    .venv/bin/python bench/http_transport.py            # --n 2000 --before main

One `taskstate serve` (SQLite file, open mode) on loopback; one keep-alive connection per
transport (httpx, httpcore, urllib3, http.client), and taskstate's own client
(`HttpClient.send`: headers, checks, typed errors) as it is now and — with `--before REF` — as
`src/taskstate/backends/http.py` was at git ref REF (loaded from `git show`, so both run in this
process); the same GET of one task-state key (and the same PUT), each round sending one
request with every side in turn, so load on the machine hits all alike. Prints p50/p90 per side
and each p50's ratio to raw http.client's, with the load average. Reported, not asserted; not
run in CI.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import httpcore
import httpx
import urllib3

from taskstate.backends import http as taskstate_http

PATH = "/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/k"
BODY = b'{"value":{"cursor":42},"expires_in":3600}'
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def module_at(ref: str) -> types.ModuleType:
    """`taskstate.backends.http` as it was at git `ref`, as a module of its own."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{ref}:src/taskstate/backends/http.py"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType(f"taskstate_http_at_{ref}")
    exec(compile(source, f"{ref}:backends/http.py", "exec"), module.__dict__)
    return module


def taskstate_client(module: types.ModuleType, port: int) -> Callable[[str, bytes | None], int]:
    client = module.HttpClient(f"http://127.0.0.1:{port}/taskstate", token="")
    path = PATH.removeprefix("/taskstate")

    def send(method: str, body: bytes | None) -> int:
        return int(client.send(module.Request(method, path, body=body)).status_code)

    return send


def transports(port: int) -> dict[str, Callable[[str, bytes | None], int]]:
    base = f"http://127.0.0.1:{port}"
    hx = httpx.Client()
    core = httpcore.ConnectionPool()
    u3 = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def via_httpx(method: str, body: bytes | None) -> int:
        return hx.request(method, base + PATH, content=body, headers=HEADERS).status_code

    def via_httpcore(method: str, body: bytes | None) -> int:
        return core.request(method, base + PATH, headers=HEADERS, content=body).status

    def via_urllib3(method: str, body: bytes | None) -> int:
        return u3.urlopen(method, PATH, body=body, headers=HEADERS, retries=False).status

    def via_http_client(method: str, body: bytes | None) -> int:
        conn.request(method, PATH, body=body, headers=HEADERS)
        response = conn.getresponse()
        response.read()
        return response.status

    return {
        "http.client": via_http_client,
        "urllib3": via_urllib3,
        "httpcore": via_httpcore,
        "httpx": via_httpx,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--before", help="also taskstate's client as it was at this git ref")
    args = parser.parse_args()
    root = tempfile.mkdtemp()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{root}/s.db", "serve",
         "--port", str(port), "--log-level", "warning"],
        env={**os.environ, "AIRFLOW_HOME": root},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/taskstate/health")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        sides = transports(port)
        sides["taskstate"] = taskstate_client(taskstate_http, port)
        if args.before:
            sides[f"taskstate@{args.before}"] = taskstate_client(module_at(args.before), port)
        for method, body in (("PUT", BODY), ("GET", None)):
            times: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(50):  # warm every connection
                for send in sides.values():
                    send(method, body)
            for _ in range(args.n):
                for name, send in sides.items():
                    started = time.perf_counter()
                    status = send(method, body)
                    times[name].append(time.perf_counter() - started)
                    assert status in (200, 204), (name, status)
            floor = statistics.median(times["http.client"])
            print(f"{method}, n={args.n} per transport, load {os.getloadavg()[0]:.2f}")
            for name, seen in times.items():
                p50 = statistics.median(seen)
                p90 = statistics.quantiles(seen, n=10)[-1]
                print(
                    f"  {name:16} p50 {p50 * 1000:.3f} ms  p90 {p90 * 1000:.3f} ms  "
                    f"p50 / http.client {p50 / floor:.2f}"
                )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
