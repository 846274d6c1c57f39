"""64 processes × 2,000 mixed operations (get/set/update/compare_and_set) through PgBouncer in
transaction pooling mode with a pool of 4 server connections, against the same processes on
direct connections, in the same run. Starts its own PostgreSQL and PgBouncer (the test harness).

    .venv/bin/python bench/pgbouncer.py [--procs 64] [--ops 2000] [--rounds 2]

Each process does its operations in `rounds` halves per side, sides alternating (direct, bouncer,
direct, bouncer...), so load on the shared machine hits both alike. Per process: 40% get, 30%
set, 20% update (+1, half on a counter of its own, half on one counter all processes share) and
10% compare_and_set (its own key, expected to win every time). Checked at the end of each side:
0 errors, every counter exact, and the server connections used (PgBouncer's SHOW SERVERS, and
PostgreSQL's pg_stat_activity for the direct side), sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from record import meta, save
from tests.pgbouncer_server import PgBouncer, running_pgbouncer
from tests.postgres_server import running_server

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.backends.postgres import PostgresBackend
from taskstate.settings import Settings

SHARED = AssetScope(name="bench-shared")


def worker(url: str, index: int, ops: int, barrier: Any, out: Any) -> None:
    """One process: `ops` operations; sends (latencies in ns, errors, own updates, shared
    updates, CAS wins)."""
    latencies: list[int] = []
    errors: list[str] = []
    own = shared_updates = wins = 0
    value = {"cursor": index, "file": "s3://bucket/part-0001.parquet"}
    with StateStore(url, settings=Settings()) as store:
        task = store.task_state(TaskScope("bench", "run", f"p{index}"))
        shared = store.asset_state(SHARED)
        task.set("k0", value)  # connect before the clock starts
        barrier.wait(600)
        clock = time.perf_counter_ns
        for i in range(ops):
            kind = i % 10
            t0 = clock()
            try:
                if kind < 4:
                    task.get(f"k{i % 50}")
                elif kind < 7:
                    task.set(f"k{i % 50}", value)
                elif kind == 7:
                    task.update("own", lambda v: v + 1, default=0)
                    own += 1
                elif kind == 8:
                    shared.update("n", lambda v: v + 1, default=0)
                    shared_updates += 1
                else:
                    current = task.get("cas")
                    if task.compare_and_set("cas", current, (current or 0) + 1):
                        wins += 1
            except Exception as exc:  # counted and shown: the run must have none
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
            latencies.append(clock() - t0)
    out.put((latencies, errors, own, shared_updates, wins))


class Sampler:
    """The most server connections seen at once, polled every 20 ms."""

    def __init__(self, count: Any) -> None:
        self.count, self.peak = count, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.count())


def run_side(url: str, procs: int, ops: int, sampler_count: Any) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs + 1), ctx.Queue()
    children = [ctx.Process(target=worker, args=(url, i, ops, barrier, out)) for i in range(procs)]
    for child in children:
        child.start()
    barrier.wait(600)
    started = time.perf_counter()
    with Sampler(sampler_count) as sampler:
        results = [out.get(timeout=3600) for _ in children]
        elapsed = time.perf_counter() - started
    for child in children:
        child.join(60)
    return {
        "latencies": [ns for r in results for ns in r[0]],
        "seconds": elapsed,
        "errors": [e for r in results for e in r[1]],
        "own": sum(r[2] for r in results),
        "shared": sum(r[3] for r in results),
        "wins": sum(r[4] for r in results),
        "peak_server_connections": sampler.peak,
        "exit_codes": sorted({c.exitcode for c in children}),
    }


def counters(url: str, procs: int) -> tuple[int, int, int]:
    """(sum of own counters, the shared counter, sum of CAS keys) as stored."""
    with StateStore(url, settings=Settings()) as store:
        tasks = [store.task_state(TaskScope("bench", "run", f"p{i}")) for i in range(procs)]
        own = sum(t.get("own") or 0 for t in tasks)
        cas = sum(t.get("cas") or 0 for t in tasks)
        return own, store.asset_state(SHARED).get("n") or 0, cas


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--ops", type=int, default=2000, help="operations per process per side")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two sides")
    parser.add_argument("--pool", type=int, default=4, help="PgBouncer's server connections")
    args = parser.parse_args()
    started = meta()
    with running_server() as server, running_pgbouncer(server, pool_size=args.pool) as bouncer:
        PostgresBackend(server.url).migrate()
        admin = psycopg.connect(server.url, autocommit=True)

        def backends() -> int:  # client sessions of the benchmark on the server
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench-direct'"
            ).fetchone()
            return int(row[0]) if row else 0

        def bouncer_servers(b: PgBouncer = bouncer) -> int:
            return sum(1 for row in b.show("SERVERS") if row["database"] != "pgbouncer")

        sides = {
            "direct": (server.url + "?application_name=bench-direct", backends),
            "pgbouncer": (bouncer.url, bouncer_servers),
        }
        totals: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        per_round = args.ops // args.rounds
        for _ in range(args.rounds):
            for name, (url, count) in sides.items():
                before = counters(server.url, args.procs)
                side = run_side(url, args.procs, per_round, count)
                after = counters(server.url, args.procs)
                side["exact"] = (
                    after[0] - before[0] == side["own"]
                    and after[1] - before[1] == side["shared"]
                    and after[2] - before[2] == side["wins"]
                )
                totals[name].append(side)
                shown = {k: v for k, v in side.items() if k not in ("errors", "latencies")}
                print(name, shown, flush=True)
        admin.close()

    figures: dict[str, Any] = {}
    for name, runs in totals.items():
        latencies = sorted(ns for r in runs for ns in r["latencies"])
        seconds = sum(r["seconds"] for r in runs)
        figures[name] = {
            "ops": len(latencies),
            "ops_per_s": len(latencies) / seconds,
            "p50_ms": latencies[len(latencies) // 2] / 1e6,
            "p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6,
            "errors": sum(len(r["errors"]) for r in runs),
            "first_errors": [e for r in runs for e in r["errors"]][:5],
            "exact": all(r["exact"] for r in runs),
            "peak_server_connections": max(r["peak_server_connections"] for r in runs),
        }
    d, b = figures["direct"], figures["pgbouncer"]
    figures["pgbouncer_vs_direct"] = {
        "throughput_ratio": b["ops_per_s"] / d["ops_per_s"],
        "p99_ratio": b["p99_ms"] / d["p99_ms"],
    }
    load = os.getloadavg()
    print(
        f"\n{args.procs} processes × {args.ops} mixed ops per side ({args.rounds} alternating "
        f"rounds), PgBouncer transaction mode, pool {args.pool}; load {load[0]:.1f} "
        f"{load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'side':10} {'ops/s':>8} {'p50':>8} {'p99':>8} {'errors':>6} {'exact':>5} {'servers':>7}"
    )
    for name in sides:
        f = figures[name]
        print(
            f"{name:10} {f['ops_per_s']:8.0f} {f['p50_ms']:6.2f}ms {f['p99_ms']:6.1f}ms "
            f"{f['errors']:6} {f['exact']!s:>5} {f['peak_server_connections']:7}"
        )
    ratios = figures["pgbouncer_vs_direct"]
    print(
        f"pgbouncer / direct: throughput {ratios['throughput_ratio']:.2f}×, "
        f"p99 {ratios['p99_ratio']:.2f}×"
    )
    command = f"bench/pgbouncer.py --procs {args.procs} --ops {args.ops} --rounds {args.rounds}"
    save("pgbouncer", figures, command=command, started=started)


if __name__ == "__main__":
    main()
