"""Where a versioned PostgreSQL `set` spends its time, measured so that a loaded machine moves
it little: the CPU each statement costs the server backend that runs it (/proc/<pid>/schedstat,
nanoseconds on the CPU, not waiting for it) and the client thread (time.thread_time), per
`set`, for raw statements on their own connections, interleaved one operation at a time (every
variant runs its i-th `set` before any runs its (i+1)-th).

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
        per_set: dict[tuple[str, str], list[tuple[float, float]]] = {side: [] for side in SIDES}
        for _ in range(args.rounds):
            server_ns = {side: on_cpu_ns(conns[side].info.backend_pid) for side in SIDES}
            client = dict.fromkeys(SIDES, 0.0)
            for i in range(args.ops):
                for side in SIDES:
                    statement = STATEMENTS[side[1]]
                    values = params(side[1], f"t {side[1]}", i)
                    t0 = time.thread_time()
                    conns[side].execute(statement, values, prepare=True)
                    client[side] += time.thread_time() - t0
            for side in SIDES:
                spent = on_cpu_ns(conns[side].info.backend_pid) - server_ns[side]
                per_set[side].append((spent / 1e3 / args.ops, client[side] * 1e6 / args.ops))
        for conn in conns.values():
            conn.close()
    off_server = statistics.median(s for s, _ in per_set[("full", "off")])
    off_total = off_server + statistics.median(c for _, c in per_set[("full", "off")])
    for side, found in per_set.items():
        server_us = statistics.median(s for s, _ in found)
        client_us = statistics.median(c for _, c in found)
        label = side[1] if side[0] == "full" else f"{side[1]}, no _at"
        print(
            f"{label:14} server CPU {server_us:6.1f} us/set ({server_us / off_server:.2f}x off); "
            f"client CPU {client_us:6.1f} us; both {(server_us + client_us) / off_total:.2f}x off"
        )
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
