"""Task-accessor set/get latency on the PostgreSQL backend vs a raw psycopg round trip doing the
same statement on the same server, in the same process. Starts its own server (the test harness).
Then what server-side prepared statements are worth: the accessor on a direct connection
(`prepare=auto` prepares there) vs the same with `?prepare=off` (what it does behind a pooler),
interleaved call by call, for set, get and update.

    .venv/bin/python bench/postgres_ops.py [--n 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from record import meta, save
from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope
from taskstate.backends.postgres import _GET, _SET, PostgresBackend
from taskstate.settings import Settings

SCOPE = TaskScope("bench_dag", "manual__2026-01-01", "process_records")


def paired_percentiles(
    a: Callable[[int], object], b: Callable[[int], object], n: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """p50/p95 (µs) of `a` and `b`, alternating call by call so load on a shared machine
    hits both sides alike."""
    samples: tuple[list[int], list[int]] = ([], [])
    clock = time.perf_counter_ns
    for i in range(n):
        for fn, out in ((a, samples[0]), (b, samples[1])):
            t0 = clock()
            fn(i)
            out.append(clock() - t0)
    result = []
    for out in samples:
        out.sort()
        result.append((out[n // 2] / 1000, out[int(n * 0.95)] / 1000))
    return result[0], result[1]


def compare(
    sides: tuple[str, str], rows: list[tuple[str, float, float, float, float]]
) -> dict[str, dict[str, float]]:
    """Print (op, base p50, base p95, other p50, other p95) rows with the ratios other / base;
    return them as figures."""
    base, other = sides
    print(
        f"{'op':6} {base + ' p50':>9} {base + ' p95':>9} {other + ' p50':>9} {other + ' p95':>9} "
        f"{'p50 ratio':>9} {'p95 ratio':>9}"
    )
    figures = {}
    for op, b50, b95, o50, o95 in rows:
        ratios = f"{o50 / b50:8.2f}× {o95 / b95:8.2f}×"
        print(f"{op:6} {b50:8.1f}µ {b95:8.1f}µ {o50:8.1f}µ {o95:8.1f}µ {ratios}")
        figures[op] = {
            f"{base}_p50_us": b50, f"{base}_p95_us": b95, f"{other}_p50_us": o50,
            f"{other}_p95_us": o95, "p50_ratio": o50 / b50, "p95_ratio": o95 / b95,
        }  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10000, help="operations per measurement")
    args = parser.parse_args()
    started = meta()
    with running_server() as server:
        PostgresBackend(server.url).migrate()
        store = StateStore(server.url, settings=Settings())
        ours = store.task_state(SCOPE)
        unprepared_store = StateStore(server.url + "?prepare=off", settings=Settings())
        unprepared = unprepared_store.task_state(SCOPE)
        raw = psycopg.connect(server.url, autocommit=True)
        cursor = raw.cursor()  # the fastest raw use: one cursor, prepared statements
        ns = SCOPE.namespace
        value = {"cursor": 12345, "file": "s3://bucket/part-0001.parquet"}

        def raw_set(i: int) -> None:  # a hand-written store: serialise, one prepared upsert
            now = time.time()
            params = (ns, f"k{i % 100}", json.dumps(value), now + 30 * 86400, now, None)
            cursor.execute(_SET, params, prepare=True)

        def raw_get(i: int) -> None:
            cursor.execute(_GET, (ns, f"k{i % 100}"), prepare=True)
            row = cursor.fetchone()
            assert row is not None
            json.loads(row[0])

        def our_set(i: int) -> None:
            ours.set(f"k{i % 100}", value)

        def our_get(i: int) -> None:
            ours.get(f"k{i % 100}")

        def unprepared_set(i: int) -> None:
            unprepared.set(f"k{i % 100}", value)

        def unprepared_get(i: int) -> None:
            unprepared.get(f"k{i % 100}")

        def our_update(i: int) -> None:
            ours.update(f"n{i % 100}", lambda v: v + 1, default=0)

        def unprepared_update(i: int) -> None:
            unprepared.update(f"n{i % 100}", lambda v: v + 1, default=0)

        paired_percentiles(raw_set, our_set, 1000)  # warm up both
        paired_percentiles(raw_get, our_get, 1000)
        rows = []
        for op, raw_fn, our_fn in (("set", raw_set, our_set), ("get", raw_get, our_get)):
            (r50, r95), (o50, o95) = paired_percentiles(raw_fn, our_fn, args.n)
            rows.append((op, r50, r95, o50, o95))
        prepare_rows = []
        for op, off_fn, on_fn in (
            ("set", unprepared_set, our_set),
            ("get", unprepared_get, our_get),
            ("update", unprepared_update, our_update),
        ):
            paired_percentiles(off_fn, on_fn, 500)  # warm up
            (f50, f95), (n50, n95) = paired_percentiles(off_fn, on_fn, args.n)
            prepare_rows.append((op, n50, n95, f50, f95))
        raw.close()
        store.close()
        unprepared_store.close()

    print(f"taskstate task accessor vs raw psycopg on the same PostgreSQL server, n={args.n}")
    figures: dict[str, object] = compare(("raw", "ours"), rows)
    print(f"\nthe accessor with server-side prepared statements vs prepare=off, n={args.n}")
    figures["prepare"] = compare(("on", "off"), prepare_rows)
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    save("postgres_ops", figures, command=f"bench/postgres_ops.py --n {args.n}", started=started)


if __name__ == "__main__":
    main()
