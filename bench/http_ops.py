"""taskstate's HTTP API vs Airflow 3.3.2's public state-store API, same requests, one run.

    .venv/bin/python bench/http_ops.py                 # --n 1000 --clients 32 --seconds 15

Both servers run on loopback on this machine: `taskstate serve` (SQLite file, token auth) and
Airflow 3.3.2's `airflow api-server` (SQLite metadata DB, simple auth manager, JWT), one worker
each. Latency: PUT and GET of the same task-state key over one keep-alive connection per
server, the two servers interleaved request by request, so load on the machine hits both alike.
Throughput: `--clients` keep-alive clients in a separate process, mixed GET/PUT for `--seconds`,
against each server in turn. Goals (issue 13): >= 10x lower p50 than Airflow; >= 2,000 req/s
mixed with 32 clients, 0 errors, p99 < 50 ms. Reported, not asserted. Not run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
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
from urllib.parse import quote

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
    def __init__(self, name: str, task_url: str, headers: dict[str, str]) -> None:
        self.name = name
        self.key_url = f"{task_url}/bench-key"
        self.headers = headers


def start_taskstate(stack: ExitStack, tmp: Path) -> Side:
    port = free_port()
    env = {**os.environ, "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET,
           "AIRFLOW_HOME": str(tmp / "ts-home")}  # fmt: skip
    args = [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{tmp}/ts.db", "serve",
            "--port", str(port), "--log-level", "warning"]  # fmt: skip
    stack.enter_context(process(args, env, tmp / "taskstate-serve.log"))
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/taskstate/health")
    token = subprocess.run(
        [sys.executable, "-m", "taskstate", "token", "create", "--dag-id", "ts_bench"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    task = f"{base}/taskstate/api/v2/dags/ts_bench/dagRuns/r1/taskInstances/t/state-store"
    return Side("taskstate", task, {"Authorization": f"Bearer {token}"})


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
    stack.enter_context(process([airflow, "api-server"], env, tmp / "airflow-api-server.log"))
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/api/v2/monitor/health")
    token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": "admin"})
    token.raise_for_status()
    run = quote(run_id, safe="")
    task = f"{base}/api/v2/dags/ts_bench/dagRuns/{run}/taskInstances/t/state-store"
    return Side("airflow-3.3.2", task, {"Authorization": f"Bearer {token.json()['access_token']}"})


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(sides: list[Side], n: int) -> dict[str, dict[str, list[float]]]:
    clients = {s.name: httpx.Client(headers=s.headers, timeout=30) for s in sides}
    times: dict[str, dict[str, list[float]]] = {s.name: {"set": [], "get": []} for s in sides}
    for i in range(n + 50):  # the first 50 warm up connections and caches
        for side in sides:
            client = clients[side.name]
            started = time.perf_counter()
            put = client.put(side.key_url, json={"value": {**VALUE, "cursor": i}})
            took = time.perf_counter() - started
            assert put.status_code == 204, (side.name, put.status_code, put.text)
            started = time.perf_counter()
            got = client.get(side.key_url)
            took_get = time.perf_counter() - started
            assert got.status_code == 200 and got.json()["value"]["cursor"] == i, got.text
            if i >= 50:
                times[side.name]["set"].append(took)
                times[side.name]["get"].append(took_get)
    for client in clients.values():
        client.close()
    return times


async def _drive(url: str, headers: dict[str, str], clients: int, seconds: float) -> dict[str, Any]:
    samples: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as http:

        async def worker(w: int) -> None:
            nonlocal errors
            key = f"{url}/k{w}"
            i = 0
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    if i % 2 == 0:
                        r = await http.put(key, json={"value": {**VALUE, "cursor": i}})
                        ok = r.status_code == 204
                    else:
                        r = await http.get(key)
                        ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                samples.append(time.perf_counter() - started)
                errors += not ok
                i += 1

        began = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        elapsed = time.monotonic() - began
    return {
        "requests": len(samples),
        "errors": errors,
        "rps": len(samples) / elapsed,
        "p50": pct(samples, 0.50),
        "p99": pct(samples, 0.99),
    }


def throughput(side: Side, clients: int, seconds: float) -> dict[str, Any]:
    """Driven from a separate process, so the client's CPU is not the server's."""
    task_url = side.key_url.rsplit("/", 1)[0]
    out = subprocess.run(
        [sys.executable, __file__, "--drive", task_url, "--headers", json.dumps(side.headers),
         "--clients", str(clients), "--seconds", str(seconds)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(out)
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
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--headers", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        result = asyncio.run(
            _drive(args.drive, json.loads(args.headers), args.clients, args.seconds)
        )
        print(json.dumps(result))
        return 0

    started = meta()
    figures: dict[str, Any] = {"latency": {}, "throughput": {}}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        sides = [start_taskstate(stack, Path(tmp))]
        if not args.skip_airflow:
            sides.append(start_airflow(stack, Path(tmp)))
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        times = latency(sides, args.n)
        print(f"\nlatency, keep-alive, interleaved, n={args.n} per op and side")
        figures["latency"] = latency_table(times, ("set", "get"))
        if len(sides) == 2:
            for op in ("set", "get"):
                ours, theirs = (statistics.median(times[s.name][op]) for s in sides)
                print(f"{op} p50: taskstate {theirs / ours:.1f}x faster than Airflow 3.3.2")
        print(f"\nthroughput, {args.clients} keep-alive clients in another process, "
              f"mixed PUT/GET, {args.seconds:.0f} s")  # fmt: skip
        print("| server | req/s | errors | p50 | p99 |")
        print("|---|---:|---:|---:|---:|")
        for side in sides:
            r = throughput(side, args.clients, args.seconds)
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
