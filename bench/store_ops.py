"""Task-accessor set/get latency on the embedded SQLite backend against two baselines in the
same process, measured interleaved (rounds of 500 calls, each side in turn):

- raw sqlite3 doing the same upsert/select on the same table and index as ours (what our layer
  adds: validation, retention, the size limit, the expiry check);
- raw sqlite3 on a minimal key/value table, `(k TEXT PRIMARY KEY, v TEXT)` (what a store
  without an expiry column and index pays);

both files WAL, synchronous=NORMAL like ours; our get latency at 1k vs 1M keys; and what
metrics cost (`taskstate.metrics`): the same accessor with metrics off, and with StatsD on
(aggregated in-process, flushed to a real UDP socket every second), interleaved.

    .venv/bin/python bench/store_ops.py [--n 20000] [--big 1000000]
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from record import meta, save

from taskstate import StateStore, TaskScope, TaskStateStore
from taskstate.backends.sqlite import _GET, _SET, MIGRATIONS
from taskstate.metrics import Metrics, MetricsSettings, StatsdSink
from taskstate.scope import task_prefix
from taskstate.settings import Settings

SCOPE = TaskScope("bench_dag", "manual__2026-01-01", "process_records")


def _summary(samples: list[int]) -> tuple[float, float]:
    samples.sort()
    n = len(samples)
    return samples[n // 2] / 1000, samples[int(n * 0.95)] / 1000  # microseconds


def percentiles(fn: Callable[[int], object], n: int) -> tuple[float, float]:
    samples = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        fn(i)
        samples.append(clock() - t0)
    return _summary(samples)


def interleaved(
    fns: list[Callable[[int], object]], n: int, chunk: int = 500
) -> list[tuple[float, float]]:
    """p50/p95 of each function, n calls each, in alternating rounds of `chunk` calls."""
    samples: list[list[int]] = [[] for _ in fns]
    clock = time.perf_counter_ns
    for start in range(0, n, chunk):
        for fn, out in zip(fns, samples, strict=True):
            for i in range(start, min(n, start + chunk)):
                t0 = clock()
                fn(i)
                out.append(clock() - t0)
    return [_summary(s) for s in samples]


MINIMAL_KV = "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID"
MINIMAL_SET = "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
MINIMAL_GET = "SELECT v FROM kv WHERE k = ?"


def minimal_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(MINIMAL_KV)
    return conn


def raw_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for migration in MIGRATIONS:  # the same table and index as ours
        conn.executescript(migration)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")  # so our backend adds nothing
    return conn


def fill(path: Path, count: int) -> None:
    conn = raw_connection(path)
    ns = task_prefix(SCOPE.dag_id, SCOPE.run_id, SCOPE.task_id)  # + map index: 1000 indices
    conn.execute("BEGIN")
    conn.executemany(
        _SET, ((f"{ns}{i % 1000}", f"key{i}", str(i), None, 0.0, None) for i in range(count))
    )
    conn.execute("COMMIT")
    conn.close()


def metrics_overhead(tmp: Path, n: int) -> dict[str, Any]:
    """get/set on one file, interleaved: an accessor built directly (`TaskStateStore(...)`, the
    baseline: no metrics code anywhere), one from a store with metrics off, one with StatsD on."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # receives, never read
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    statsd = MetricsSettings(statsd_on=True, statsd_host="127.0.0.1", statsd_port=port)
    url = f"sqlite:///{tmp}/metrics.db"
    off_store = StateStore(url, settings=Settings(), metrics=Metrics())
    off = off_store.task_state(SCOPE)
    plain = TaskStateStore(StateStore(url, settings=Settings(), metrics=Metrics()), SCOPE)
    on_metrics = Metrics([StatsdSink(statsd)], flush_seconds=1.0)
    on = StateStore(url, settings=Settings(), metrics=on_metrics).task_state(SCOPE)
    assert type(off) is TaskStateStore and type(on) is not TaskStateStore
    value = {"cursor": 12345, "file": "s3://bucket/part-0001.parquet"}
    figures: dict[str, Any] = {}
    for op, fns in (
        ("set", [lambda i, a=a: a.set(f"k{i % 100}", value) for a in (plain, off, on)]),
        ("get", [lambda i, a=a: a.get(f"k{i % 100}") for a in (plain, off, on)]),
    ):
        for fn in fns:
            percentiles(fn, 2000)
        (b50, b95), (f50, f95), (s50, s95) = interleaved(fns, n)
        figures[op] = {
            "plain": {"p50_us": b50, "p95_us": b95},
            "off": {"p50_us": f50, "p95_us": f95},
            "statsd": {"p50_us": s50, "p95_us": s95},
        }
    on_metrics.close()
    listener.close()
    print(f"\nmetrics cost vs an accessor built directly, n={n}, interleaved, p50 (p95)")
    print(f"{'op':4} {'plain':>15} {'off':>15} {'statsd on':>15} {'off ratio':>10} {'on ratio':>9}")
    for op, by in figures.items():
        b, f, s = (by[side] for side in ("plain", "off", "statsd"))
        print(
            f"{op:4} {b['p50_us']:6.1f}µ ({b['p95_us']:5.1f}) {f['p50_us']:6.1f}µ "
            f"({f['p95_us']:5.1f}) {s['p50_us']:6.1f}µ ({s['p95_us']:5.1f}) "
            f"{f['p50_us'] / b['p50_us']:9.3f}× {s['p50_us'] / b['p50_us']:8.3f}×"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000, help="operations per measurement")
    parser.add_argument("--big", type=int, default=1_000_000, help="keys in the large store")
    parser.add_argument("--metrics-only", action="store_true", help="only the metrics cost")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    if args.metrics_only:
        started = meta()
        figures = {"n": args.n, "metrics": metrics_overhead(tmp, args.n)}
        command = f"bench/store_ops.py --metrics-only --n {args.n}"
        save("store_ops_metrics", figures, command=command, started=started)
        return

    started = meta()
    ours = StateStore(f"sqlite:///{tmp}/ours.db", settings=Settings()).task_state(SCOPE)
    raw = raw_connection(tmp / "raw.db")
    minimal = minimal_connection(tmp / "minimal.db")
    ns = SCOPE.namespace
    value = {"cursor": 12345, "file": "s3://bucket/part-0001.parquet"}

    def raw_set(i: int) -> None:  # what a hand-written store does: serialise, upsert
        now = time.time()
        raw.execute(_SET, (ns, f"k{i % 100}", json.dumps(value), now + 30 * 86400, now, None))

    def raw_get(i: int) -> None:
        row = raw.execute(_GET, (ns, f"k{i % 100}")).fetchone()
        json.loads(row[0])

    def minimal_set(i: int) -> None:
        minimal.execute(MINIMAL_SET, (f"{ns}\x1fk{i % 100}", json.dumps(value)))

    def minimal_get(i: int) -> None:
        row = minimal.execute(MINIMAL_GET, (f"{ns}\x1fk{i % 100}",)).fetchone()
        json.loads(row[0])

    def our_set(i: int) -> None:
        ours.set(f"k{i % 100}", value)

    def our_get(i: int) -> None:
        ours.get(f"k{i % 100}")

    for fn in (raw_set, minimal_set, our_set, raw_get, minimal_get, our_get):  # warm up
        percentiles(fn, 2000)
    figures: dict[str, Any] = {"n": args.n, "ops": {}}
    for op, fns in (
        ("set", [raw_set, minimal_set, our_set]),
        ("get", [raw_get, minimal_get, our_get]),
    ):
        (r50, r95), (m50, m95), (o50, o95) = interleaved(fns, args.n)
        figures["ops"][op] = {
            "same_table": {"p50_us": r50, "p95_us": r95},
            "minimal_kv": {"p50_us": m50, "p95_us": m95},
            "ours": {"p50_us": o50, "p95_us": o95},
        }

    print(
        f"taskstate task accessor vs raw sqlite3 (WAL, synchronous=NORMAL), n={args.n}, interleaved"
    )
    print(
        f"{'op':4} {'baseline':>12} {'base p50':>9} {'base p95':>9} {'ours p50':>9} "
        f"{'ours p95':>9} {'p50 ratio':>9} {'p95 ratio':>9}"
    )
    for op, by in figures["ops"].items():
        o = by["ours"]
        for base in ("same_table", "minimal_kv"):
            b = by[base]
            print(
                f"{op:4} {base:>12} {b['p50_us']:8.1f}µ {b['p95_us']:8.1f}µ {o['p50_us']:8.1f}µ "
                f"{o['p95_us']:8.1f}µ {o['p50_us'] / b['p50_us']:8.2f}× "
                f"{o['p95_us'] / b['p95_us']:8.2f}×"
            )

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
    figures["get_by_size"] = {
        str(count): {"p50_us": p50, "p95_us": p95}
        for count, (p50, p95) in zip(sizes, gets, strict=True)
    }
    figures["metrics"] = metrics_overhead(tmp, args.n)
    command = f"bench/store_ops.py --n {args.n} --big {args.big}"
    save("store_ops", figures, command=command, started=started)


if __name__ == "__main__":
    main()
