"""Where a versioned PostgreSQL `set` spends its time, measured so that a loaded machine moves
it little: the CPU each statement costs the server backend that runs it (/proc/<pid>/schedstat,
nanoseconds on the CPU, not waiting for it) and the client thread (time.thread_time), per
`set` (the median of each `set`'s own, as the goal is a p50, and the mean, which spreads the
trim every 16th `set` runs over all of them), for raw statements on their own connections,
interleaved one operation at a time (every variant runs its i-th `set` before any runs its
(i+1)-th).

Variants: `off` (the plain upsert, history off); `every write` (the trim a DELETE in the
write's statement, as before the trim function); `join w` (the statement before the version
took its value and expiry from the parameters: a join with the row written); `now` (the
statement `set` runs: the trim function called on every 16th number); `no trim` (the same
without any trim: the floor of the mark + version writes); `now, no _at` (the statement in a
database without the versions' (namespace_md5, key_md5, updated_at, version) index: that
index's share); `no mark` (the number from the key's newest version + 1 instead of the mark's
upsert: NOT usable, a writer waiting on another's row lock reads the newest version from its
statement's snapshot and takes the same number, and a number would come back after pruning;
only the mark's share); `floor, no _at` (the version row inserted alone, at a number from the
clock, into the versions table without `_at`: no mark, no trim, one index: any second table's
least cost). Each `set` is a task's with the default settings: 30 days' expiry,
its writer recorded. Linux only (schedstat).

`--fsync` runs the server at PostgreSQL's default durability (fsync on, synchronous_commit on:
each COMMIT waits for its WAL to reach the disk) instead of the test harness's fsync off; every
side always runs on the same server, so a ratio is always like for like. It also prints each
`set`'s wall-clock p50 (the same interleaved operations: at fsync on the flush is part of the
cost) and the WAL bytes a `set` writes (400 more `set`s per side, one side after the other,
without the full-page image a page's first change after a checkpoint adds).

    .venv/bin/python bench/history_statements.py [--ops 2000] [--rounds 7] [--fsync]
        [--profile test|production]

Prints the load (os.getloadavg) at the start and the end; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import json
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
RETENTION = 30 * 86400.0  # default_retention_days
BY = json.dumps(
    {"dag_id": "bench", "kind": "task", "map_index": -1, "run_id": "on", "task_id": "task"}
)
FINAL = "SELECT count(*) FROM t"
SET_VERSION = pg._MARK.format(value="%(value)s, %(exp)s", source="FROM m")
# The statement before the version took its value from the parameters: a join with the row.
JOIN_W = pg._SET_KEPT.replace(SET_VERSION, pg._MARK_AND_KEEP).replace(
    "RETURNING namespace, key), ", "RETURNING namespace, key, value, expires_at), "
)
EVERY_WRITE = JOIN_W.replace(
    pg._TRIM + FINAL,
    f"DELETE FROM {pg.VERSIONS} WHERE {pg._NAMED_KEY} "
    "AND version <= (SELECT version FROM m) - %(keep)s",
)
STATEMENTS = {
    "off": pg._SET,
    "every write": EVERY_WRITE,
    "join w": JOIN_W,
    "now": pg._SET_KEPT,
    "no trim": pg._SET_KEPT.replace(pg._TRIM + FINAL, "SELECT 1"),
    "no mark": pg._SET_KEPT.replace(
        SET_VERSION.split("v AS")[0],
        f"m AS (SELECT namespace, key, 1 + coalesce((SELECT max(version) FROM {pg.VERSIONS} "
        f"WHERE {pg._NAMED_KEY}), 0) AS version FROM w), ",
    ),
    "floor": pg._SET_KEPT.replace(
        SET_VERSION + pg._TRIM + FINAL,
        f"v AS (INSERT INTO {pg.VERSIONS} "
        "(namespace, key, version, value, expires_at, updated_at, updated_by, op) "
        "SELECT namespace, key, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint, "
        "%(value)s, %(exp)s, %(at)s, %(by)s, %(op)s FROM w RETURNING 1) SELECT 1",
    ),
}
assert len(set(STATEMENTS.values())) == len(STATEMENTS), "the statement changed: update this bench"
# (database, statement): the first database has the schema as migrated; "no_at" drops the index.
SIDES = [("full", name) for name in STATEMENTS if name != "floor"]
SIDES += [("no_at", "now"), ("no_at", "floor")]


def on_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def params(statement: str, namespace: str, i: int) -> Any:
    """A task's `set` with the default settings: its expiry the 30 days' retention (so the row's
    update is never HOT: expires_at is indexed) and its writer, as a task records it."""
    value, at = f'{{"n": {i}}}', time.time()
    expires = at + RETENTION
    if statement == "off":
        return (namespace, f"k{i % KEYS}", value, expires, at, BY)
    return {
        "ns": namespace, "key": f"k{i % KEYS}", "value": value, "exp": expires, "at": at,
        "by": BY, "op": "set", "meta": pg.META_PREFIX, "keep": 20,
    }  # fmt: skip


def wal_per_set(
    conns: dict[tuple[str, str], psycopg.Connection[Any]], done: int
) -> dict[Any, float]:
    """The WAL bytes of 400 more `set`s of each side, one side after the other: every page they
    change was changed since the last checkpoint already, so no full-page image is counted
    (those come once per page per checkpoint, whatever its number of changes)."""
    wal = {}
    for side, conn in conns.items():
        start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        for i in range(done, done + 400):
            conn.execute(STATEMENTS[side[1]], params(side[1], f"t {side[1]}", i), prepare=True)
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", start).fetchone()
        wal[side] = float(row[0]) / 400 if row else 0.0
    return wal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--fsync", action="store_true", help="fsync on: the default durability")
    parser.add_argument("--profile", default="test", help="the server's settings (PROFILES)")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread; {KEYS} keys; 20 versions "
        f"kept; {args.ops} sets x {args.rounds} rounds per side, interleaved per operation; "
        f"server fsync {'on' if args.fsync else 'off'}, profile {args.profile}"
    )
    with running_server(fsync=args.fsync, profile=args.profile) as server:
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
        walls: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
        pids = {side: conns[side].info.backend_pid for side in SIDES}
        for r in range(args.rounds):
            spent: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
            wall: dict[tuple[str, str], list[float]] = {side: [] for side in SIDES}
            for i in range(r * args.ops, (r + 1) * args.ops):
                for side in SIDES:
                    statement = STATEMENTS[side[1]]
                    values = params(side[1], f"t {side[1]}", i)
                    s0, c0, w0 = on_cpu_ns(pids[side]), time.thread_time_ns(), time.perf_counter()
                    conns[side].execute(statement, values, prepare=True)
                    w1, c1, s1 = time.perf_counter(), time.thread_time_ns(), on_cpu_ns(pids[side])
                    spent[side].append((s1 - s0 + c1 - c0) / 1e3)
                    wall[side].append((w1 - w0) * 1e6)
            for side in SIDES:
                p50s[side].append(statistics.median(spent[side]))
                means[side].append(statistics.fmean(spent[side]))
                walls[side].append(statistics.median(wall[side]))
        wal = wal_per_set(conns, args.ops * args.rounds)
        for conn in conns.values():
            conn.close()
    off_p50 = statistics.median(p50s[("full", "off")])
    off_mean = statistics.median(means[("full", "off")])
    off_wall = statistics.median(walls[("full", "off")])
    for side in SIDES:
        p50, mean = statistics.median(p50s[side]), statistics.median(means[side])
        label = side[1] if side[0] == "full" else f"{side[1]}, no _at"
        line = (
            f"{label:15} server + client CPU per set: p50 {p50:6.1f} us ({p50 / off_p50:.2f}x), "
            f"mean {mean:6.1f} us ({mean / off_mean:.2f}x off); WAL {wal[side]:5.0f} B/set"
        )
        if args.fsync:  # the flush each COMMIT waits for is not CPU: the wall clock holds it
            wall_p50 = statistics.median(walls[side])
            line += f"; wall p50 {wall_p50:6.1f} us ({wall_p50 / off_wall:.2f}x)"
        print(line)
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
