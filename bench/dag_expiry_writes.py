"""What an index by (DAG, expiry) (docs/backends.md, "Key counts of /dags") would cost a write:
`set` that overwrites a key and `set` that creates one (both with the default 30-day retention,
so both write an entry into it), on a store with the index, on the same store without it, and
with it instead of the expiry index (the bench builds it and prints how long that took: on
SQLite, under the write lock), in the same process, interleaved (rounds of `--ops` calls, each
side in turn, the order reversed every round), on SQLite and PostgreSQL, with the wall clock
(each `set` expires after the one before). Each store holds `--rows` rows of bench/scale.py's
shape (10% expired), and the keys overwritten are sampled uniformly over them. The load average
is printed; ratios are to the store without it.

    .venv/bin/python bench/dag_expiry_writes.py [--rows 1000000] [--rounds 20] [--ops 200]
        [--backends sqlite,postgres] [--pg-root DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from record import meta, save
from scale import rows, scope_of
from side_urls import side_urls
from tests.expired_rows import load_rows

from taskstate import StateStore, TaskScope
from taskstate.backends import postgres as pg
from taskstate.backends import sqlite as lite
from taskstate.settings import Settings

# The index (docs/backends.md, "Key counts of /dags", "Why not"), as the count catalog keys a
# DAG: PostgreSQL by its id's md5, with the namespace included (so a count reads the index
# alone), over the expiring task rows of namespaces short enough to be b-tree entries whole;
# SQLite by its id (the index holds each row's namespace and key: the table has no rowid).
INDEX = f"{pg.TABLE}_dag_expires"
CREATE = {
    "postgres": f"CREATE INDEX {INDEX} ON {pg.TABLE} "
    f"((md5(split_part(namespace, chr(31), 2))::uuid), expires_at) INCLUDE (namespace) "
    "WHERE expires_at IS NOT NULL AND left(namespace, 2) = 't' || chr(31) "
    "AND octet_length(namespace) <= 1000",
    "sqlite": f"CREATE INDEX {INDEX} ON {lite.TABLE} "
    f"({lite._DAG_OF.format(ns='namespace')}, expires_at) "
    f"WHERE expires_at IS NOT NULL AND {lite._IS_TASK.format(ns='namespace')}",
}


# "replaced": the index instead of the expiry index (`clean` would then walk the DAGs).
SIDES = ("with", "without", "replaced")


def indexed(kind: str, url: str) -> float:
    """The index built on a loaded store (SQLite: under its write lock, the only way SQLite
    builds one); the seconds it took."""
    started = time.perf_counter()
    if kind == "sqlite":
        conn = sqlite3.connect(lite.path_from_url(url), isolation_level=None)
        conn.execute(CREATE[kind])
        conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg_conn:
            pg_conn.execute(CREATE[kind])
            pg_conn.execute(f"VACUUM ANALYZE {pg.TABLE}")
    return time.perf_counter() - started


def run(kind: str, urls: dict[str, str], n: int, rounds: int, ops: int) -> dict[str, Any]:
    stores: dict[str, StateStore] = {}
    for side, url in urls.items():
        # The wall clock: each `set` expires later than the one before, as in service (the
        # bench store's rows all expire at one instant, and a clock stopped there would put
        # every new index entry among its DAG's equal keys, in heap order: a random leaf).
        store = StateStore(url, settings=Settings(), clock=time.time)
        store.migrate()
        started = time.perf_counter()
        load_rows(url, rows(n, None))
        if kind == "postgres":
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"VACUUM ANALYZE {pg.TABLE}")
        print(f"{kind} {side}: {n} rows in {time.perf_counter() - started:.0f}s", flush=True)
        if side in ("with", "replaced"):
            print(f"{kind}: CREATE INDEX took {indexed(kind, url):.1f}s", flush=True)
        if side == "replaced":  # the alternative: it instead of the expiry index
            drop = f"DROP INDEX {lite.TABLE}_expires"
            if kind == "sqlite":
                conn = sqlite3.connect(lite.path_from_url(url), isolation_level=None)
                conn.execute(drop)
                conn.close()
            else:
                with psycopg.connect(url, autocommit=True) as pg_conn:
                    pg_conn.execute(drop)
        stores[side] = store
    times: dict[str, list[float]] = {}
    made = dict.fromkeys(stores, 0)
    rng = random.Random(7)
    for r in range(rounds):
        order = list(stores) if r % 2 == 0 else list(reversed(stores))
        picks = [scope_of(rng.randrange(n)) for _ in range(ops)]  # the same keys each side
        for side in order:
            store = stores[side]
            for what in ("overwrite", "create"):
                samples = times.setdefault(f"{side} {what}", [])
                for i, (scope, key) in enumerate(picks):
                    if what == "create":
                        made[side] += 1
                        scope = TaskScope(scope.dag_id, scope.run_id, f"new_{made[side] // 3}")
                    state = store.task_state(scope)
                    t0 = time.perf_counter()
                    state.set(key, {"offset": i})
                    samples.append(time.perf_counter() - t0)
    for store in stores.values():
        store.close()
    out: dict[str, Any] = {}
    for key, samples in times.items():
        out[f"{key} p50 us"] = round(statistics.median(samples) * 1e6, 1)
    for what in ("overwrite", "create"):
        for side in ("with", "replaced"):
            out[f"{what} ratio {side}/without"] = round(
                out[f"{side} {what} p50 us"] / out[f"without {what} p50 us"], 3
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-root", default=None, help="where the PostgreSQL server lives")
    args = parser.parse_args()
    started = meta()
    figures: dict[str, Any] = {"rows": args.rows, "rounds": args.rounds, "ops": args.ops}
    figures["load start"] = os.getloadavg()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for kind in args.backends.split(","):
        with side_urls(kind, SIDES, prefix="x", pg_root=args.pg_root) as urls:
            figures[kind] = run(kind, urls, args.rows, args.rounds, args.ops)
        print(kind, figures[kind], flush=True)
    figures["load end"] = os.getloadavg()
    save("dag-expiry-writes", figures, command=" ".join(sys.argv), started=started)


if __name__ == "__main__":
    main()
