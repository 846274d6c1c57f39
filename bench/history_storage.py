"""History's storage: bytes per kept version, and a checkpoint loop writing one key a million
times with default settings (20 versions per key), on SQLite and PostgreSQL.

    .venv/bin/python bench/history_storage.py [--writes 1000000] [--keys 2000] [--versions 20]

Bytes per version: `--keys` keys each written `--versions` times with a typical checkpoint value
(`{"offset": N, "at": "<ISO time>", "file": "s3://…/part-N.parquet"}`, 80-90 bytes of JSON),
once with history on and once off, in one process; the difference in the database's size
(SQLite: pages in use, from `PRAGMA page_count - freelist_count`; PostgreSQL:
`pg_total_relation_size` of the two history tables, indexes and TOAST included) divided by the
versions kept. The loop: `--writes` sets of one key, then `taskstate clean`; prints the rows of
`taskstate_versions` and the sizes during and after. Prints the load; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.settings import Settings


def _value(n: int) -> dict[str, object]:
    return {"offset": n, "at": "2026-12-01T03:00:00Z", "file": f"s3://lake/orders/part-{n}.parquet"}


def _store(url: str, versions: int) -> StateStore:
    return StateStore(url, settings=dataclasses.replace(Settings(), history_versions=versions))


def _sqlite_bytes(store: StateStore) -> int:
    conn = store.backend._conn()  # type: ignore[attr-defined]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def _postgres_bytes(store: StateStore) -> int:
    sql = (
        "SELECT pg_total_relation_size('taskstate_versions') "
        "+ pg_total_relation_size('taskstate_version_marks')"
    )
    backend = store.backend
    return int(backend._run(lambda conn: conn.execute(sql).fetchone()[0]))  # type: ignore[attr-defined]


def _count(store: StateStore) -> int:
    sql = "SELECT count(*) FROM taskstate_versions"
    backend = store.backend
    if isinstance(backend, SQLiteBackend):
        return int(backend._conn().execute(sql).fetchone()[0])  # type: ignore[attr-defined]
    return int(backend._run(lambda conn: conn.execute(sql).fetchone()[0]))  # type: ignore[attr-defined]


def per_version(name: str, urls: dict[str, str], keys: int, versions: int) -> None:
    sizes = {}
    for side, kept in (("on", versions), ("off", 0)):
        store = _store(urls[side], kept)
        if name == "postgres":
            store.migrate()
        state = store.task_state(TaskScope("bench", side, "task"))
        for n in range(versions):
            for k in range(keys):
                state.set(f"checkpoint-{k}", _value(n * keys + k))
        if name == "postgres":
            store.backend._run(lambda conn: conn.execute("VACUUM ANALYZE"))  # type: ignore[attr-defined]
        measure = _sqlite_bytes if name == "sqlite" else _postgres_bytes
        sizes[side] = (measure(store), _count(store))
        store.close()
    (on, kept_rows), (off, _) = sizes["on"], sizes["off"]
    print(
        f"{name}: {keys} keys x {versions} writes; {kept_rows} versions kept; history on "
        f"{on / 1e6:.2f} MB, off {off / 1e6:.2f} MB -> {(on - off) / kept_rows:.0f} bytes per "
        "version (row, indexes, the per-key mark)"
    )


def checkpoint_loop(name: str, url: str, writes: int) -> None:
    store = _store(url, Settings().history_versions)
    if name == "postgres":
        store.migrate()
    state = store.task_state(TaskScope("bench", "loop", "task"))
    measure = _sqlite_bytes if name == "sqlite" else _postgres_bytes
    started = time.perf_counter()
    for n in range(writes):
        state.set("checkpoint", _value(n))
        if n + 1 in (writes // 10, writes // 2):
            print(f"{name}: after {n + 1} writes: {_count(store)} versions, {measure(store)} bytes")
    seconds = time.perf_counter() - started
    print(
        f"{name}: {writes} writes of one key in {seconds:.0f} s: {_count(store)} versions, "
        f"{measure(store)} bytes before clean"
    )
    result = store.cleanup()
    if name == "postgres":
        store.backend._run(lambda conn: conn.execute("VACUUM taskstate_versions"))  # type: ignore[attr-defined]
    print(
        f"{name}: after clean ({result.versions_pruned} pruned): {_count(store)} versions, "
        f"{measure(store)} bytes; history(): {len(state.history('checkpoint'))} versions, "
        f"newest #{state.history('checkpoint', 1)[0].version}"
    )
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread")
    if args.backend in ("sqlite", "both"):
        root = tempfile.mkdtemp()
        urls = {side: f"sqlite:///{root}/{side}.db" for side in ("on", "off")}
        per_version("sqlite", urls, args.keys, args.versions)
        checkpoint_loop("sqlite", f"sqlite:///{root}/loop.db", args.writes)
    if args.backend in ("postgres", "both"):
        with running_server() as server:
            base = server.url.rsplit("/", 1)[0]
            import psycopg

            with psycopg.connect(server.url, autocommit=True) as admin:
                for db in ("h_on", "h_off", "h_loop"):
                    admin.execute(f"CREATE DATABASE {db}")
            urls = {"on": f"{base}/h_on", "off": f"{base}/h_off"}
            per_version("postgres", urls, args.keys, args.versions)
            checkpoint_loop("postgres", f"{base}/h_loop", args.writes)
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
