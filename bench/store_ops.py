"""Task-accessor set/get latency on the embedded SQLite backend vs raw sqlite3 doing the same
upsert/select on the same kind of file, in the same process; and get latency at 1k vs 1M keys.

    .venv/bin/python bench/store_ops.py [--n 20000] [--big 1000000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from taskstate import StateStore, TaskScope, TaskStateStore
from taskstate.backends.sqlite import _GET, _SET, MIGRATIONS
from taskstate.scope import task_prefix
from taskstate.settings import Settings

SCOPE = TaskScope("bench_dag", "manual__2026-01-01", "process_records")


def percentiles(fn: Callable[[int], object], n: int) -> tuple[float, float]:
    samples = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        fn(i)
        samples.append(clock() - t0)
    samples.sort()
    return samples[n // 2] / 1000, samples[int(n * 0.95)] / 1000  # microseconds


def raw_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in MIGRATIONS[0].split(";"):  # the same table and index as ours
        conn.execute(statement)
    return conn


def fill(path: Path, count: int) -> None:
    conn = raw_connection(path)
    ns = task_prefix(SCOPE.dag_id, SCOPE.run_id, SCOPE.task_id)  # + map index: 1000 indices
    conn.execute("BEGIN")
    conn.executemany(
        _SET, ((f"{ns}{i % 1000}", f"key{i}", str(i), None, 0.0) for i in range(count))
    )
    conn.execute("COMMIT")
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000, help="operations per measurement")
    parser.add_argument("--big", type=int, default=1_000_000, help="keys in the large store")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())

    ours = StateStore(f"sqlite:///{tmp}/ours.db", settings=Settings()).task_state(SCOPE)
    raw = raw_connection(tmp / "raw.db")
    ns = SCOPE.namespace
    value = {"cursor": 12345, "file": "s3://bucket/part-0001.parquet"}

    def raw_set(i: int) -> None:  # what a hand-written store does: serialise, upsert
        now = time.time()
        raw.execute(_SET, (ns, f"k{i % 100}", json.dumps(value), now + 30 * 86400, now))

    def raw_get(i: int) -> None:
        row = raw.execute(_GET, (ns, f"k{i % 100}")).fetchone()
        json.loads(row[0])

    def our_set(i: int) -> None:
        ours.set(f"k{i % 100}", value)

    def our_get(i: int) -> None:
        ours.get(f"k{i % 100}")

    for fn in (raw_set, our_set, raw_get, our_get):  # warm up both
        percentiles(fn, 2000)
    rows = []
    for op, raw_fn, our_fn in (("set", raw_set, our_set), ("get", raw_get, our_get)):
        r50, r95 = percentiles(raw_fn, args.n)
        o50, o95 = percentiles(our_fn, args.n)
        rows.append((op, r50, r95, o50, o95))

    print(f"taskstate task accessor vs raw sqlite3 (WAL, synchronous=NORMAL), n={args.n}")
    print(
        f"{'op':4} {'raw p50':>9} {'raw p95':>9} {'ours p50':>9} {'ours p95':>9} "
        f"{'p50 ratio':>9} {'p95 ratio':>9}"
    )
    for op, r50, r95, o50, o95 in rows:
        ratios = f"{o50 / r50:8.2f}× {o95 / r95:8.2f}×"
        print(f"{op:4} {r50:8.1f}µ {r95:8.1f}µ {o50:8.1f}µ {o95:8.1f}µ {ratios}")

    sizes = (1000, args.big)
    gets = []
    for count in sizes:
        path = tmp / f"size{count}.db"
        fill(path, count)
        store = StateStore(f"sqlite:///{path}", settings=Settings())
        acc = store.task_state(TaskScope("bench_dag", "manual__2026-01-01", "process_records", 7))
        assert acc.get("key7") == 7

        def get(i: int, acc: TaskStateStore = acc, count: int = count) -> None:
            acc.get(f"key{(i * 1000 + 7) % count}")  # always a hit: index 7 holds key7, key1007…

        gets.append(percentiles(get, args.n))
    print(f"\nget latency by store size (ours), n={args.n}")
    for count, (p50, p95) in zip(sizes, gets, strict=True):
        print(f"{count:>9} keys: p50 {p50:6.1f}µ  p95 {p95:6.1f}µ")
    print(
        f"ratio {sizes[1]} / {sizes[0]}: p50 {gets[1][0] / gets[0][0]:.2f}×  "
        f"p95 {gets[1][1] / gets[0][1]:.2f}×"
    )


if __name__ == "__main__":
    main()
