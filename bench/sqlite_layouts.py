"""SQLite's own point read at 10 k and 10 M rows, by table layout (issue 22). Not in CI.

Is the 10 M / 10 k ratio of a `get` on SQLite something a different layout would fix? This
measures the engine alone (the raw SELECT, no taskstate code), on two layouts holding the same
rows, every store read interleaved in rounds in one process:
- `text_pk`: the state table as taskstate keeps it (`WITHOUT ROWID`, primary key
  `(namespace, key)`, the same columns);
- `hash_rowid`: a rowid table keyed by a 64-bit hash of (namespace, key) (an 8-byte key: the
  widest fan-out SQLite's b-tree gives), the namespace and key checked beside it.

Rows have the bench stores' shape (DAGs of 20 runs x 50 task instances x 3 keys, a task's
writer on each). The stores are built once in `--work` and kept; every file is read once
before the timed rounds (in the OS cache, as a store in service). `--mmap` maps each whole file.

    .venv/bin/python bench/sqlite_layouts.py --work DIR [--mmap] [--sizes 10000,10000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import meta, save

VALUE = '{"cursor": 1234567, "path": "s3://bucket/prefix/part-00042.parquet", "n": 17}'
WRITER = '{"dag_id":"d","run_id":"r","task_id":"t","map_index":-1,"try_number":1}'
COLUMNS = "value TEXT NOT NULL, expires_at REAL, updated_at REAL NOT NULL, updated_by TEXT"
READ = "SELECT value, expires_at, updated_by, updated_at FROM s WHERE "


def name(i: int) -> tuple[str, str]:
    """Row i's (namespace, key): 3 keys per task instance, 50 per run, 20 runs per DAG."""
    dag, rest = divmod(i, 3_000)
    run, rest = divmod(rest, 150)
    ti, key = divmod(rest, 3)
    run_id = f"scheduled__2026-11-{run + 1:02d}T00:00:00+00:00"
    return f"t\x1fdag_{dag:05d}\x1f{run_id}\x1ftask_{ti:03d}\x1f-1", f"key_{key}"


def key_hash(namespace: str, key: str) -> int:
    digest = hashlib.blake2b(f"{namespace}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# layout -> (DDL, INSERT, row of (namespace, key), SELECT, its parameters)
Params = Callable[[str, str], tuple[Any, ...]]
Layout = tuple[str, str, Params, str, Params]
LAYOUTS: dict[str, Layout] = {
    "text_pk": (
        f"CREATE TABLE s (namespace TEXT NOT NULL, key TEXT NOT NULL, {COLUMNS}, "
        "PRIMARY KEY (namespace, key)) WITHOUT ROWID",
        "INSERT INTO s VALUES (?, ?, ?, ?, ?, ?)",
        lambda ns, k: (ns, k, VALUE, 2e9, 1.7e9, WRITER),
        READ + "namespace = ? AND key = ?",
        lambda ns, k: (ns, k),
    ),
    "hash_rowid": (
        f"CREATE TABLE s (id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL, "
        f"{COLUMNS})",
        "INSERT INTO s VALUES (?, ?, ?, ?, ?, ?, ?)",
        lambda ns, k: (key_hash(ns, k), ns, k, VALUE, 2e9, 1.7e9, WRITER),
        READ + "id = ? AND namespace = ? AND key = ?",
        lambda ns, k: (key_hash(ns, k), ns, k),
    ),
}


def build(work: Path, layout: str, size: int) -> Path:
    path = work / f"{layout}-{size}.db"
    if path.exists():
        return path
    ddl, insert, row, _, _ = LAYOUTS[layout]
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    conn = sqlite3.connect(partial)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute(ddl)
    started = time.perf_counter()
    for start in range(0, size, 100_000):
        with conn:
            rows = (row(*name(i)) for i in range(start, min(size, start + 100_000)))
            conn.executemany(insert, rows)
    conn.close()
    partial.rename(path)
    print(f"built {layout} {size:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True, type=Path, help="where the stores are kept")
    parser.add_argument("--sizes", default="10000,10000000")
    parser.add_argument("--mmap", action="store_true", help="map each whole file")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of 500 reads per store")
    parser.add_argument("--out", default="sqlite-layouts")
    args = parser.parse_args()
    small, large = (int(s) for s in args.sizes.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    started = meta()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    conns: dict[tuple[str, int], sqlite3.Connection] = {}
    for layout in LAYOUTS:
        for size in (small, large):
            path = build(args.work, layout, size)
            with path.open("rb") as f:  # into the OS cache: a store in service
                while f.read(1 << 24):
                    pass
            conn = sqlite3.connect(path)
            if args.mmap:
                conn.execute(f"PRAGMA mmap_size={path.stat().st_size}")
            conns[layout, size] = conn
    times: dict[tuple[str, int], list[float]] = {side: [] for side in conns}
    rng = random.Random(1)
    clock = time.perf_counter
    for _ in range(args.rounds):
        for (layout, size), conn in conns.items():
            select, params = LAYOUTS[layout][3], LAYOUTS[layout][4]
            for i in (rng.randrange(size) for _ in range(500)):
                bound = params(*name(i))
                t = clock()
                conn.execute(select, bound).fetchone()
                times[layout, size].append(clock() - t)
    figures: dict[str, Any] = {"mmap": args.mmap, "sizes": [small, large]}
    for layout in LAYOUTS:
        a, b = (statistics.median(times[layout, s]) * 1e6 for s in (small, large))
        pages = conns[layout, large].execute("PRAGMA page_count").fetchone()[0]
        figures[layout] = {"p50 us": [round(a, 2), round(b, 2)], "ratio": round(b / a, 2)}
        print(
            f"{layout:10} {small:,}: {a:5.2f} us  {large:,}: {b:5.2f} us  ({pages:,} pages)  "
            f"ratio {b / a:.2f}x",
            flush=True,
        )
    print(f"load average at end: {os.getloadavg()}")
    save(args.out, figures, command=" ".join(sys.argv), started=started)


if __name__ == "__main__":
    main()
