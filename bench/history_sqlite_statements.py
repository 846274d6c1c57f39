"""Where a versioned SQLite `set` spends its time: the raw statements of a `set` with history
on (20 versions per key) and off, each variant on its own database file and connection, run
interleaved one operation at a time in this process (every variant runs its i-th `set` before
any runs its (i+1)-th), timed as this thread's CPU (time.thread_time_ns: SQLite runs in the
calling thread, so that is the statement, its commit and the WAL's write calls, and not the
waiting for a CPU that a loaded machine adds). Per round the p50 of each variant over the p50
of `off`; the median of the rounds is printed, with the WAL frames (pages) each commit wrote
(each connection checkpoints every `CHECKPOINT_EVERY` sets, untimed, as SQLite's automatic
checkpoint would every 1,000 frames, so the WAL is rewritten from its start, not grown).

Variants (all through the same upsert, WAL, synchronous=normal, 100 keys):
`off` (history off); `before` (the trigger as it was: its operation read from a second call
into Python); `now` (the trigger `set` installs: the operation a constant); `no mark read` (the
number from the newest kept version alone: wrong for a mark left ahead by the previous schema,
so not usable); `no stamp read` (the version stamped at the write's time without reading the
previous stamp: `as_of` needs that read, so not usable); `no updated_by` (a version row without
its writer: the row's size); `page_size 1024` / `8192` (`off` and `now` on smaller and
larger pages, which only a new file can have: VACUUM rewrites the file); `no reads` (the row
put in the versions' b-tree at a number known in advance: no number, mark or stamp read, the
insert at each key's end alone); `floor` (the row appended to a rowid table with no key order
and no trim: one more b-tree at its cheapest).

    .venv/bin/python bench/history_sqlite_statements.py [--ops 8000] [--rounds 5]

Prints the load (os.getloadavg) at the start and the end; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from taskstate.backends import sqlite as lite

KEYS = 100
KEEP = 20
CHECKPOINT_EVERY = 200
NAMESPACE = "t\x1fbench\x1fon\x1ftask\x1f-1"
BY = json.dumps(
    {"dag_id": "bench", "kind": "task", "map_index": -1, "run_id": "on", "task_id": "task"}
)
NEW = {
    "ns": "new.namespace",
    "key": "new.key",
    "value": "new.value",
    "expires_at": "new.expires_at",
    "at": "new.updated_at",
    "by": "new.updated_by",
}
NEWEST_VERSION = (
    f"(SELECT version FROM {lite.VERSIONS} WHERE namespace = new.namespace AND key = new.key "
    "ORDER BY version DESC LIMIT 1)"
)
STAMP = (
    f"max(new.updated_at, coalesce((SELECT updated_at FROM {lite.VERSIONS} WHERE namespace = "
    "new.namespace AND key = new.key ORDER BY version DESC LIMIT 1), new.updated_at))"
)
NUMBER = (
    f"1 + max(coalesce({NEWEST_VERSION}, 0), coalesce((SELECT version FROM {lite.MARKS} "
    "WHERE namespace = new.namespace AND key = new.key), 0))"
)
BEFORE = lite._APPEND_NEW.format(**NEW, op="taskstate_op()")
NO_MARK_READ = lite._VERSIONING_BODY.replace(NUMBER, f"1 + coalesce({NEWEST_VERSION}, 0)")
NO_STAMP_READ = lite._VERSIONING_BODY.replace(STAMP, "new.updated_at")
NO_BY = lite._VERSIONING_BODY.replace("new.updated_by, 'set'", "NULL, 'set'")
assert NUMBER in lite._VERSIONING_BODY and STAMP in lite._VERSIONING_BODY, "the trigger changed"
assert "new.updated_by, 'set'" in lite._VERSIONING_BODY, "the trigger changed"
FLOOR = (
    "INSERT INTO floor VALUES (new.namespace, new.key, new.value, new.expires_at, "
    "new.updated_at, new.updated_by, 'set')"
)
# The version's b-tree alone: the row at a number known without a read (`set` i writes key
# i % KEYS at 1e9 + i: its number is i // KEYS + 1), no mark, no stamp read; trimmed as `now`.
NO_READS = (
    f"INSERT INTO {lite.VERSIONS} VALUES (new.namespace, new.key, CAST((new.updated_at - 1e9) "
    f"/ {KEYS} AS INTEGER) + 1, new.value, new.expires_at, new.updated_at, new.updated_by, 'set')"
)


class Flags:
    """What the trigger functions read, as `_Versioning` holds it."""

    on = False
    keep = KEEP


def database(folder: str, name: str, page_size: int | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(Path(folder) / f"{name}.db", isolation_level=None, cached_statements=64)
    if page_size is not None:
        conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = normal")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # main() checkpoints and counts the frames
    for step in lite.MIGRATIONS:
        conn.executescript(step)
    conn.execute(
        "CREATE TABLE floor (namespace, key, value, expires_at, updated_at, updated_by, op)"
    )
    return conn


def variant(conn: sqlite3.Connection, body: str | None, trim: bool = True) -> Callable[[int], None]:
    """One `set` of key i % KEYS: the plain upsert (`body` None), or under versioning
    triggers whose body is `body` (the statement `set` runs with history on)."""
    flags = Flags()
    if body is not None:
        conn.create_function("taskstate_versioning", 0, lambda: flags.on)
        conn.create_function("taskstate_op", 0, lambda: "set" if flags.on else None)
        conn.create_function("taskstate_keep", 0, lambda: flags.keep)
        statements = lite._VERSIONING if trim else lite._VERSIONING[:2]
        for statement in statements:
            conn.execute(statement.replace(lite._VERSIONING_BODY, body))

    def run(i: int) -> None:
        now = 1e9 + i
        flags.on = True
        try:
            conn.execute(
                lite._SET, (NAMESPACE, f"k{i % KEYS}", json.dumps({"n": i}), now + 1e6, now, BY)
            )
        finally:
            flags.on = False

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="taskstate-history-sqlite-")
    sides = {
        "off": (None, None, True),
        "before (op from a 2nd Python call)": (BEFORE, None, True),
        "now": (lite._VERSIONING_BODY, None, True),
        "now, no trim": (lite._VERSIONING_BODY, None, False),
        "no mark read (unusable)": (NO_MARK_READ, None, True),
        "no stamp read (unusable)": (NO_STAMP_READ, None, True),
        "no updated_by (row size)": (NO_BY, None, True),
        "off, page_size 1024": (None, 1024, True),
        "now, page_size 1024": (lite._VERSIONING_BODY, 1024, True),
        "off, page_size 8192": (None, 8192, True),
        "now, page_size 8192": (lite._VERSIONING_BODY, 8192, True),
        "no reads: the keyed b-tree alone": (NO_READS, None, True),
        "floor: a rowid table, append": (FLOOR, None, False),
    }
    runs, conns, frames = {}, {}, dict.fromkeys(sides, 0)
    for n, (name, (body, page_size, trim)) in enumerate(sides.items()):
        conns[name] = database(folder, str(n), page_size)
        runs[name] = variant(conns[name], body, trim)
    load = os.getloadavg()
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    p50s: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        times: dict[str, list[int]] = {name: [] for name in runs}
        for i in range(r * args.ops, (r + 1) * args.ops):
            for name, run in runs.items():
                t0 = time.thread_time_ns()
                run(i)
                times[name].append(time.thread_time_ns() - t0)
            if (i + 1) % CHECKPOINT_EVERY == 0:
                for name, conn in conns.items():
                    frames[name] += conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        for name in runs:
            p50s[name].append(statistics.median(times[name]))
            ratios[name].append(p50s[name][-1] / p50s["off"][-1])
    print(
        f"load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; {args.ops} sets x {args.rounds} rounds "
        f"per variant, {KEYS} keys, {KEEP} versions kept, 1 thread; CPU per set"
    )
    total = args.ops * args.rounds // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    for name in runs:
        print(
            f"{name:36s} p50 {statistics.median(p50s[name]) / 1e3:6.2f} us "
            f"({statistics.median(ratios[name]):.2f}x off; rounds "
            f"{min(ratios[name]):.2f}-{max(ratios[name]):.2f}), "
            f"{frames[name] / total:.2f} pages per commit"
        )


if __name__ == "__main__":
    main()
