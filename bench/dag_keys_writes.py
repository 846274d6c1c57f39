"""What the count catalog (docs/backends.md, "Key counts of /dags") costs a write: `set` that
overwrites a key, `set` that creates one, and `delete`, on a store with the catalog's triggers
and on the same schema without them, in the same process, interleaved (rounds of `--ops` calls,
each side in turn, sides swapped every round), on SQLite and PostgreSQL. The load average is
printed; ratios are with/without.

    .venv/bin/python bench/dag_keys_writes.py [--rounds 20] [--ops 200] [--backends sqlite,postgres]
        [--pg-root DIR]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from record import meta, save
from side_urls import side_urls

from taskstate.backends import postgres as pg
from taskstate.backends import sqlite as lite
from taskstate.backends.base import Row, StateBackend
from taskstate.scope import TaskScope

PRELOAD = 20_000  # rows in each store before the timed rounds


def uncounted(kind: str, url: str) -> None:
    """The catalog's triggers dropped: the schema as it was before the step, for writes."""
    table = lite.DAG_KEYS if kind == "sqlite" else pg.DAG_KEYS
    drops = [f"DROP TRIGGER {table}_{event}" for event in ("created", "deleted")]
    if kind == "sqlite":
        conn = sqlite3.connect(lite.path_from_url(url), isolation_level=None)
        for sql in drops:
            conn.execute(sql)
        conn.close()
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in drops:
            conn.execute(f"{sql} ON {pg.TABLE}")


def run(kind: str, urls: dict[str, str], rounds: int, ops: int) -> dict[str, Any]:
    backends: dict[str, StateBackend] = {}
    for side, url in urls.items():
        backend: StateBackend = (
            lite.SQLiteBackend(url) if kind == "sqlite" else pg.PostgresBackend(url)
        )
        backend.migrate()
        for i in range(PRELOAD // 10):
            backend.set_many([
                Row(TaskScope(f"dag_{i % 50}", f"run_{i}", "t").namespace, f"k{k}", "1",
                         None, 1.0, None) for k in range(10)
            ])  # fmt: skip
        if side == "without":
            uncounted(kind, url)
        backends[side] = backend
    times: dict[str, list[float]] = {}
    made = {side: 0 for side in backends}
    for r in range(rounds):
        order = list(backends) if r % 2 == 0 else list(reversed(backends))
        for side in order:
            b = backends[side]
            ns = TaskScope("dag_7", "run_7", "t").namespace  # preloaded keys k0..k9
            for what in ("overwrite", "create", "delete"):
                samples = times.setdefault(f"{side} {what}", [])
                for i in range(ops):
                    if what == "overwrite":
                        args: tuple[Any, ...] = (ns, f"k{i % 10}", str(i), None, 2.0)
                        t0 = time.perf_counter()
                        b.set(*args)
                    elif what == "create":
                        made[side] += 1
                        new = TaskScope("dag_new", f"r{made[side] // 50}", "t").namespace
                        args = (new, f"k{made[side] % 50}", "1", None, 2.0)
                        t0 = time.perf_counter()
                        b.set(*args)
                    else:
                        gone = TaskScope(
                            "dag_new", f"r{(made[side] - ops + i) // 50}", "t"
                        ).namespace
                        t0 = time.perf_counter()
                        b.delete(gone, f"k{(made[side] - ops + i) % 50}")
                    samples.append(time.perf_counter() - t0)
    for b in backends.values():
        b.close()
    out: dict[str, Any] = {}
    for key, samples in times.items():
        out[f"{key} p50 us"] = round(statistics.median(samples) * 1e6, 1)
    for what in ("overwrite", "create", "delete"):
        out[f"{what} ratio with/without"] = round(
            out[f"with {what} p50 us"] / out[f"without {what} p50 us"], 3
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-root", default=None, help="where the PostgreSQL server lives")
    args = parser.parse_args()
    started = meta()
    figures: dict[str, Any] = {"rounds": args.rounds, "ops": args.ops, "preload": PRELOAD}
    figures["load start"] = os.getloadavg()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for kind in args.backends.split(","):
        with side_urls(kind, ("with", "without"), prefix="w", pg_root=args.pg_root) as urls:
            figures[kind] = run(kind, urls, args.rounds, args.ops)
        print(kind, figures[kind], flush=True)
    figures["load end"] = os.getloadavg()
    save("dag-keys-writes", figures, command=" ".join(sys.argv), started=started)


if __name__ == "__main__":
    main()
