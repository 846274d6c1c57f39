"""Retention cleanup of 1M expired task rows on SQLite and PostgreSQL, in batches, while another
process keeps writing task state: rows/s, longest batch, and how long the writer ever waited.
The baseline is the same writer in the same run before cleanup starts. Starts its own server.

    .venv/bin/python bench/cleanup_scale.py [--rows 1000000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from record import meta, save
from tests.expired_rows import load
from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope
from taskstate.settings import Settings


def writer(url: str, stop: Event, out: Connection) -> None:
    """Set task state in a loop; report (start time, latency) of every set."""
    samples: list[tuple[float, float]] = []
    with StateStore(url, settings=Settings()) as store:
        accessor = store.task_state(TaskScope("live_dag", "run", "task"))
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            accessor.set(f"k{i % 100}", {"i": i})
            samples.append((t0, time.perf_counter() - t0))
            i += 1
    out.send(samples)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def run(kind: str, url: str, rows: int, batch: int) -> dict[str, float]:
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    load(url, rows, time.time())
    ctx = mp.get_context("spawn")
    stop, (receive, send) = ctx.Event(), ctx.Pipe(duplex=False)
    proc = ctx.Process(target=writer, args=(url, stop, send))
    proc.start()
    time.sleep(3.0)  # the writer's baseline, before cleanup
    with StateStore(url, settings=Settings()) as store:
        started = time.perf_counter()
        result = store.cleanup(batch_size=batch)
        ended = time.perf_counter()
    time.sleep(0.5)
    stop.set()
    samples: list[tuple[float, float]] = receive.recv()
    proc.join()
    before = [lat for t, lat in samples if t < started - 0.5]
    during = [lat for t, lat in samples if started <= t <= ended]
    assert result.deleted == rows, result
    return {
        "seconds": result.seconds,
        "rows_per_s": result.deleted / result.seconds,
        "batches": result.batches,
        "longest_batch_ms": result.longest_batch_s * 1000,
        "idle_p99_ms": quantile(before, 0.99) * 1000,
        "during_p50_ms": quantile(during, 0.5) * 1000,
        "during_p99_ms": quantile(during, 0.99) * 1000,
        "during_max_ms": max(during) * 1000,
        "writes_during": len(during),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000, help="expired task rows")
    parser.add_argument("--batch", type=int, default=10000, help="state_cleanup_batch_size")
    args = parser.parse_args()
    started = meta()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run("sqlite", f"sqlite:///{tmp}/state.db", args.rows, args.batch)
    with running_server() as server:
        results["postgres"] = run("postgres", server.url, args.rows, args.batch)

    print(f"cleanup of {args.rows} expired task rows, batch size {args.batch}, one writer busy")
    print(
        f"{'backend':9} {'rows/s':>9} {'seconds':>8} {'batches':>8} {'longest':>9} "
        f"{'writer idle p99':>16} {'during p50':>11} {'p99':>8} {'max':>8} {'max/idle p99':>13}"
    )
    for kind, r in results.items():
        print(
            f"{kind:9} {r['rows_per_s']:9.0f} {r['seconds']:8.1f} {r['batches']:8.0f} "
            f"{r['longest_batch_ms']:7.1f}ms {r['idle_p99_ms']:14.2f}ms "
            f"{r['during_p50_ms']:9.2f}ms {r['during_p99_ms']:6.1f}ms {r['during_max_ms']:6.1f}ms "
            f"{r['during_max_ms'] / r['idle_p99_ms']:12.1f}×"
        )
    figures = {"rows": args.rows, "batch": args.batch, "backends": results}
    command = f"bench/cleanup_scale.py --rows {args.rows} --batch {args.batch}"
    save("cleanup_scale", figures, command=command, started=started)


if __name__ == "__main__":
    main()
