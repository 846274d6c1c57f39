"""Does a trigger using task state delay the other triggers on the triggerer's event loop?

    .venv/bin/python bench/trigger_loop_lag.py            # --calls 1000 --rounds 3

One event loop, as in Airflow's triggerer: a heartbeat trigger sleeps 5 ms and records how
late it wakes (the loop lag every other trigger sees), while another trigger makes `--calls`
state calls (aset/aget alternating) through `TriggerStateMixin`. The loop's default executor
is cut to 1 thread and kept busy, like a triggerer whose small pool other work holds. Sides,
interleaved round by round on each backend: `taskstate` (the mixin's async twins) and
`blocking` (the same calls made synchronously inside the coroutine, what a trigger calling
`get`/`set` would do). Backends: a SQLite file, a real PostgreSQL server
(tests/postgres_server.py), and `taskstate serve` on loopback in its own process (SQLite
behind it, tokens minted per try). Goal (issue 25): heartbeat p99 lag <= 10 ms on the
taskstate side. Reported, not asserted; not run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from record import meta, save  # noqa: E402

from taskstate.airflow import inject  # noqa: E402
from taskstate.airflow.triggers import TriggerStateMixin  # noqa: E402

SECRET = "bench-trigger-lag-secret-0123456789abcdef"
BEAT = 0.005


class StateTrigger(TriggerStateMixin):
    task_instance = SimpleNamespace(dag_id="lag", run_id="r", task_id="t", map_index=-1,
                                    try_number=1)  # fmt: skip


async def heartbeat(stop: asyncio.Event, lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(BEAT)
        lags.append(loop.time() - start - BEAT)


async def calls(n: int, blocking: bool) -> None:
    state = StateTrigger().task_state_store
    for i in range(n):
        if blocking:
            state.set("cursor", i) if i % 2 == 0 else state.get("cursor")
        elif i % 2 == 0:
            await state.aset("cursor", i)
        else:
            await state.aget("cursor")


async def one_side(n: int, blocking: bool) -> tuple[list[float], float]:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    release = threading.Event()
    busy = loop.run_in_executor(None, release.wait)  # the small default pool, held
    stop, lags = asyncio.Event(), []
    beat = asyncio.create_task(heartbeat(stop, lags))
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    await calls(n, blocking)
    took = time.perf_counter() - start
    stop.set()
    await beat
    release.set()
    await busy
    return lags, took


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def backend(name: str, root: Path) -> Iterator[str]:
    if name == "sqlite":
        yield f"sqlite:///{root}/state.db"
    elif name == "postgresql":
        from tests.postgres_server import running_server

        with running_server() as server:
            from taskstate.backends.postgres import PostgresBackend

            PostgresBackend(server.url).migrate()
            yield server.url
    else:
        port = free_port()
        env = {**os.environ, "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET}
        proc = subprocess.Popen(
            [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{root}/served.db",
             "serve", "--port", str(port), "--log-level", "warning"],
            env=env,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/taskstate"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("taskstate serve did not start")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql", "http"])
    args = parser.parse_args()
    started = meta()
    os.environ["AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY"] = SECRET
    figures: dict[str, Any] = {"calls": args.calls, "rounds": args.rounds, "beat_ms": BEAT * 1000}
    print(f"{args.calls} state calls per side per round, {args.rounds} rounds, heartbeat "
          f"{BEAT * 1000:.0f} ms, loop default executor 1 thread (held), load "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")  # fmt: skip
    print("| backend | side | lag p50 ms | lag p99 ms | lag max ms | beats | calls/s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends:
            root = Path(tmp) / name
            root.mkdir()
            with backend(name, root) as url:
                os.environ["AIRFLOW__STATE_STORE__TASKSTATE_URL"] = url
                inject._process_store = None
                sides: dict[str, tuple[list[float], float]] = {"taskstate": ([], 0.0),
                                                               "blocking": ([], 0.0)}  # fmt: skip
                for _ in range(args.rounds):
                    for side in ("taskstate", "blocking"):
                        lags, took = asyncio.run(one_side(args.calls, side == "blocking"))
                        sides[side][0].extend(lags)
                        sides[side] = (sides[side][0], sides[side][1] + took)
                for side, (lags, took) in sides.items():
                    row = {
                        "p50_ms": round(p(lags, 0.5), 2),
                        "p99_ms": round(p(lags, 0.99), 2),
                        "max_ms": round(max(lags) * 1000, 2),
                        "beats": len(lags),
                        "calls_per_s": round(args.calls * args.rounds / took),
                        "mean_ms": round(statistics.fmean(lags) * 1000, 3),
                    }
                    figures[f"{name}/{side}"] = row
                    print(f"| {name} | {side} | {row['p50_ms']} | {row['p99_ms']} | "
                          f"{row['max_ms']} | {row['beats']} | {row['calls_per_s']} |")  # fmt: skip
                inject._process_store = None
    save("trigger_loop_lag", figures, command="bench/trigger_loop_lag.py", started=started)


if __name__ == "__main__":
    main()
