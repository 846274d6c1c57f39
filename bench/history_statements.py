"""Where a versioned PostgreSQL `set` spends its time, measured so that a loaded machine moves
it little: the CPU each statement costs the server backend that runs it (/proc/<pid>/schedstat,
nanoseconds on the CPU, not waiting for it) and the client thread (time.thread_time), per
`set` (the median of each `set`'s own, as the goal is a p50, and the mean, which spreads the
trim every 16th `set` runs over all of them), for raw statements on their own connections,
interleaved one operation at a time (every variant runs its i-th `set` before any runs its
(i+1)-th).

Variants: `off` (the plain upsert, history off); `every write` (the trim a DELETE in the
write's statement, as before the trim function); `now` (the statement `set` runs: the trim
function called on every 16th number); `no trim` (the same without any trim: the floor of the
mark + version writes); `now, no _at` (the statement in a database without the versions'
(namespace_md5, key_md5, updated_at, version) index: that index's share). Linux only (schedstat).

    .venv/bin/python bench/history_statements.py [--ops 2000] [--rounds 7]

Prints the load (os.getloadavg) at the start and the end; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from tests.postgres_server import running_server

from taskstate import StateStore
from taskstate.backends import postgres as pg

KEYS = 100
FINAL = "SELECT count(*) FROM t"
EVERY_WRITE = pg._SET_KEPT.replace(
    pg._TRIM + FINAL,
    f"DELETE FROM {pg.VERSIONS} WHERE {pg._NAMED_KEY} "
    "AND version <= (SELECT version FROM m) - %(keep)s",
)
STATEMENTS = {
    "off": pg._SET,
    "every write": EVERY_WRITE,
    "now": pg._SET_KEPT,
    "no trim": pg._SET_KEPT.replace(pg._TRIM + FINAL, "SELECT 1"),
}
# (database, statement): the first database has the schema as migrated; "no_at" drops the index.
SIDES = [("full", name) for name in STATEMENTS] + [("no_at", "now")]


def on_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def params(statement: str, namespace: str, i: int) -> Any:
    value = f'{{"n": {i}}}'
    if statement == "off":
        return (namespace, f"k{i % KEYS}", value, None, time.time(), None)
    return {
        "ns": namespace, "key": f"k{i % KEYS}", "value": value, "exp": None, "at": time.time(),
        "by": None, "op": "set", "meta": pg.META_PREFIX, "keep": 20,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    assert EVERY_WRITE != pg._SET_KEPT, "the statement changed: update this bench"
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread; {KEYS} keys; 20 versions "
        f"kept; {args.ops} sets x {args.rounds} rounds per side, interleaved per operation"
    )
    with running_server() as server:
        urls = {}
        for database in ("full", "no_at"):
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE hs_{database}")
            urls[database] = server.url.rsplit("/", 1)[0] + f"/hs_{database}"
            with StateStore(urls[database]) as store:
                store.migrate()
        with psycopg.connect(urls["no_at"], autocommit=True) as conn:
            conn.execute(f"DROP INDEX {pg.VERSIONS}_at")
        conns = {side: psycopg.connect(urls[side[0]], autocommit=True) for side in SIDES}
        p50s: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
        means: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
        pids = {side: conns[side].info.backend_pid for side in SIDES}
        for _ in range(args.rounds):
            spent: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
            for i in range(args.ops):
                for side in SIDES:
                    statement = STATEMENTS[side[1]]
                    values = params(side[1], f"t {side[1]}", i)
                    s0, c0 = on_cpu_ns(pids[side]), time.thread_time_ns()
                    conns[side].execute(statement, values, prepare=True)
                    c1, s1 = time.thread_time_ns(), on_cpu_ns(pids[side])
                    spent[side].append((s1 - s0 + c1 - c0) / 1e3)
            for side in SIDES:
                p50s[side].append(statistics.median(spent[side]))
                means[side].append(statistics.fmean(spent[side]))
        for conn in conns.values():
            conn.close()
    off_p50 = statistics.median(p50s[("full", "off")])
    off_mean = statistics.median(means[("full", "off")])
    for side in SIDES:
        p50, mean = statistics.median(p50s[side]), statistics.median(means[side])
        label = side[1] if side[0] == "full" else f"{side[1]}, no _at"
        print(
            f"{label:14} server + client CPU per set: p50 {p50:6.1f} us ({p50 / off_p50:.2f}x), "
            f"mean {mean:6.1f} us ({mean / off_mean:.2f}x off)"
        )
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
