"""taskstate's HTTP API vs Airflow 3.3.2's public state-store API, same requests, one run.

    .venv/bin/python bench/http_ops.py                 # --n 1000 --clients 32 --seconds 15

Both servers run on loopback on this machine, one worker each, on SQLite with the same
durability (every commit synced to disk before it is answered): `taskstate serve` (token
auth) on a file opened with `?synchronous=full` (WAL), and Airflow 3.3.2's `airflow
api-server` (simple auth manager, JWT) on its SQLite metadata DB (SQLite's defaults: rollback
journal, synchronous=FULL). Latency: PUT and GET of the same task-state key over one
keep-alive `http.client` connection per server, the two servers interleaved request by
request, so load on the machine hits both alike. Server CPU per request: each server's own
processes' CPU time (Linux schedstat) around blocks of PUTs and GETs, servers in turn — little
moved by how busy the machine is. Throughput: `--clients` keep-alive HTTP/1.1 clients on
asyncio streams (a lean driver, so the figure is the server's) in a separate process, mixed
GET/PUT for `--seconds`, against each server in turn. Goals (issue 23's stretch): >= 10x lower
p50 than Airflow; >= 2,000 req/s mixed with 32 clients, 0 errors, p99 < 50 ms. Reported, not
asserted. Not run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from record import meta, save

REPO = Path(__file__).resolve().parents[1]
SECRET = "bench-http-ops-secret-0123456789abcdefgh"
DAG = """
import pendulum
from airflow.sdk import dag, task

@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_bench():
    @task
    def t():
        return None
    t()

ts_bench()
"""
VALUE = {"cursor": 0, "rows": list(range(10)), "note": "checkpoint"}
JSON = "application/json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up")


@contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[int]:
    """Run `args` in its own process group (its id yielded) until the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            yield proc.pid
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Side:
    """A server under test: its task-state collection URL, its credentials, its process
    group (for its CPU time)."""

    def __init__(self, name: str, task_url: str, headers: dict[str, str], group: int) -> None:
        self.name = name
        self.key_url = f"{task_url}/bench-key"
        self.headers = headers
        self.group = group
        parts = urlsplit(task_url)
        self.port = parts.port or 80
        self.path = parts.path  # the task-state collection, escaped as sent

    def cpu_ns(self) -> int:
        """CPU time the server's processes (every thread) have run, in ns (Linux schedstat):
        unlike latency, hardly moved by how busy the machine is."""
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) != self.group:
                    continue
                for task in (proc / "task").iterdir():
                    total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
        return total


def start_taskstate(stack: ExitStack, tmp: Path) -> Side:
    port = free_port()
    env = {**os.environ, "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET,
           "AIRFLOW_HOME": str(tmp / "ts-home")}  # fmt: skip
    url = f"sqlite:///{tmp}/ts.db?synchronous=full"  # every commit synced, as Airflow's SQLite
    args = [sys.executable, "-m", "taskstate", "--url", url, "serve",
            "--port", str(port), "--log-level", "warning"]  # fmt: skip
    group = stack.enter_context(process(args, env, tmp / "taskstate-serve.log"))
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/taskstate/health")
    token = subprocess.run(
        [sys.executable, "-m", "taskstate", "token", "create", "--dag-id", "ts_bench"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    task = f"{base}/taskstate/api/v2/dags/ts_bench/dagRuns/r1/taskInstances/t/state-store"
    return Side("taskstate", task, {"Authorization": f"Bearer {token}"}, group)


def start_airflow(stack: ExitStack, tmp: Path) -> Side:
    out = subprocess.run(["bash", str(REPO / "scripts" / "airflow-env.sh"), "3.3"],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    env_dir = Path(out.strip().splitlines()[-1])
    home = tmp / "airflow-home"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "ts_bench.py").write_text(DAG)
    (home / "passwords.json").write_text(json.dumps({"admin": "admin"}))
    port = free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env = {
        **base_env,
        "PATH": f"{env_dir / 'bin'}:{base_env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": "bench-jwt-secret-0123456789abcdef",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    }
    airflow = str(env_dir / "bin" / "airflow")
    for args in (["db", "migrate"], ["dags", "reserialize"], ["dags", "test", "ts_bench"]):
        subprocess.run([airflow, *args], env=env, cwd=home, check=True, capture_output=True)
    with sqlite3.connect(home / "airflow.db") as db:
        (run_id,) = db.execute("SELECT run_id FROM dag_run WHERE dag_id = 'ts_bench'").fetchone()
    group = stack.enter_context(
        process([airflow, "api-server"], env, tmp / "airflow-api-server.log")
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/api/v2/monitor/health")
    token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": "admin"})
    token.raise_for_status()
    run = quote(run_id, safe="")
    task = f"{base}/api/v2/dags/ts_bench/dagRuns/{run}/taskInstances/t/state-store"
    bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
    return Side("airflow-3.3.2", task, bearer, group)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(sides: list[Side], n: int, ops: tuple[str, str] = ("set", "get"),
            warm: int = 50) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """PUT then GET of one key over one keep-alive `http.client` connection per server, the
    servers interleaved request by request; the first `warm` rounds are not counted."""
    conns = {s.name: http.client.HTTPConnection("127.0.0.1", s.port, timeout=30) for s in sides}
    times: dict[str, dict[str, list[float]]] = {s.name: {op: [] for op in ops} for s in sides}
    for i in range(n + warm):
        for side in sides:
            conn = conns[side.name]
            body = json.dumps({"value": {**VALUE, "cursor": i}})
            headers = {**side.headers, "Content-Type": "application/json"}
            url = f"{side.path}/bench-key"
            started = time.perf_counter()
            conn.request("PUT", url, body, headers)
            response = conn.getresponse()
            response.read()
            took_put = time.perf_counter() - started
            assert response.status == 204, (side.name, response.status)
            started = time.perf_counter()
            conn.request("GET", url, headers=side.headers)
            response = conn.getresponse()
            got = response.read()
            took_get = time.perf_counter() - started
            assert response.status == 200 and json.loads(got)["value"]["cursor"] == i, got
            if i >= warm:
                times[side.name][ops[0]].append(took_put)
                times[side.name][ops[1]].append(took_get)
    for conn in conns.values():
        conn.close()
    return times


def server_cpu(sides: list[Side], n: int, blocks: int = 10) -> dict[str, dict[str, float]]:
    """The servers' own CPU per request (µs), by op: `blocks` rounds of n/blocks PUTs, then
    as many GETs, on each server in turn, the server's CPU time read around each run (a
    connection per run, opened first: an idle one may pass the server's keep-alive timeout
    while the other server's run goes on)."""
    spent: dict[str, dict[str, int]] = {s.name: {"PUT": 0, "GET": 0} for s in sides}
    per = max(1, n // blocks)
    body = json.dumps({"value": VALUE})
    for _ in range(blocks):
        for op in ("PUT", "GET"):
            for side in sides:
                conn = http.client.HTTPConnection("127.0.0.1", side.port, timeout=30)
                conn.connect()
                url, headers = f"{side.path}/bench-key", {**side.headers, "Content-Type": JSON}
                before = side.cpu_ns()
                for _ in range(per):
                    conn.request(op, url, body if op == "PUT" else None, headers)
                    conn.getresponse().read()
                spent[side.name][op] += side.cpu_ns() - before
                conn.close()
    return {name: {op: ns / (per * blocks) / 1000 for op, ns in ops.items()}
            for name, ops in spent.items()}  # fmt: skip


def cpu_table(sides: list[Side], n: int) -> dict[str, dict[str, float]]:
    """`server_cpu`, printed as a Markdown table."""
    cpu = server_cpu(sides, n)
    print(f"\nserver CPU per request (all its processes and threads; n={n} per op and side, "
          "in blocks, servers in turn):")  # fmt: skip
    print("| server | PUT µs | GET µs |\n|---|---:|---:|")
    for side in sides:
        print(f"| {side.name} | {cpu[side.name]['PUT']:.0f} | {cpu[side.name]['GET']:.0f} |")
    return cpu


async def drive(port: int, path: str, headers: dict[str, str], clients: int,
                seconds: float) -> dict[str, Any]:  # fmt: skip
    """`clients` keep-alive HTTP/1.1 connections on asyncio streams, mixed PUT/GET of one key
    per client: a lean client, so the figure is the server's."""
    samples: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    async def worker(w: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        url = f"{path}/k{w}"
        i = 0
        while time.monotonic() < stop:
            if i % 2 == 0:
                body = json.dumps({"value": {**VALUE, "cursor": i}}).encode()
                head = (
                    f"PUT {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Type: "
                    f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                request, want = head.encode() + body, 204
            else:
                request = f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()
                want = 200
            started = time.perf_counter()
            writer.write(request)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            samples.append(time.perf_counter() - started)
            errors += int(status_line.split()[1]) != want
            i += 1
        writer.close()

    began = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    elapsed = time.monotonic() - began
    return {"requests": len(samples), "errors": errors, "rps": len(samples) / elapsed,
            "p50": pct(samples, 0.50), "p99": pct(samples, 0.99)}  # fmt: skip


def throughput(script: str, port: int, path: str, headers: dict[str, str], clients: int,
               seconds: float) -> dict[str, Any]:  # fmt: skip
    """`drive`, from a separate process (`script --drive`), so the client's CPU is not the
    server's."""
    args = ["--drive", str(port), "--path", path, "--headers", json.dumps(headers),
            "--clients", str(clients), "--seconds", str(seconds)]  # fmt: skip
    done = subprocess.run([sys.executable, script, *args], check=True, capture_output=True,
                          text=True)  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def latency_table(
    times: dict[str, dict[str, list[float]]], ops: tuple[str, str]
) -> dict[str, dict[str, float]]:
    """Print p50/p95 of each side's two ops as a Markdown table; return them in ms."""
    print(f"| server | {ops[0]} p50 | {ops[0]} p95 | {ops[1]} p50 | {ops[1]} p95 |")
    print("|---|---:|---:|---:|---:|")
    out: dict[str, dict[str, float]] = {}
    for name, t in times.items():
        out[name] = {
            f"{op} {q}_ms": 1000 * (statistics.median(t[op]) if q == "p50" else pct(t[op], .95))
            for op in ops for q in ("p50", "p95")
        }  # fmt: skip
        cells = " | ".join(f"{ms(statistics.median(t[op]))} | {ms(pct(t[op], 0.95))}" for op in ops)
        print(f"| {name} | {cells} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="latency samples per op and side")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--skip-airflow", action="store_true")
    parser.add_argument("--drive", type=int, help=argparse.SUPPRESS)
    for hidden in ("--path", "--headers"):  # the --drive child's arguments
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        result = asyncio.run(drive(args.drive, args.path, json.loads(args.headers),
                                   args.clients, args.seconds))  # fmt: skip
        print(json.dumps(result))
        return 0

    started = meta()
    figures: dict[str, Any] = {"latency": {}, "throughput": {}}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        sides = [start_taskstate(stack, Path(tmp))]
        if not args.skip_airflow:
            sides.append(start_airflow(stack, Path(tmp)))
        print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        times = latency(sides, args.n)
        print(f"\nlatency, one keep-alive http.client connection per server, interleaved, "
              f"n={args.n} per op and side, one key (one row)")  # fmt: skip
        figures["latency"] = latency_table(times, ("set", "get"))
        if len(sides) == 2:
            for op in ("set", "get"):
                ours, theirs = (statistics.median(times[s.name][op]) for s in sides)
                figures[f"{op} p50 Airflow / taskstate"] = round(theirs / ours, 2)
                print(f"{op} p50: taskstate {theirs / ours:.1f}x faster than Airflow 3.3.2")
        figures["server cpu us"] = cpu_table(sides, args.n)
        print(f"\nthroughput, {args.clients} keep-alive clients in another process, "
              f"mixed PUT/GET, {args.seconds:.0f} s")  # fmt: skip
        print("| server | req/s | errors | p50 | p99 |")
        print("|---|---:|---:|---:|---:|")
        for side in sides:
            r = throughput(__file__, side.port, side.path, side.headers, args.clients,
                           args.seconds)  # fmt: skip
            figures["throughput"][side.name] = r
            print(f"| {side.name} | {r['rps']:.0f} | {r['errors']} | {ms(r['p50'])} "
                  f"| {ms(r['p99'])} |")  # fmt: skip
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    command = f"bench/http_ops.py --n {args.n} --clients {args.clients} --seconds {args.seconds:g}"
    if not args.skip_airflow:
        save("http_ops", figures, command=command, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
