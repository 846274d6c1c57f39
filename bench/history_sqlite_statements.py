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
and no trim: one more b-tree at its cheapest); `log, moved every N` (issue 26's time-ordered
version log: the trigger appends the version to a rowid table as `floor` does, and the insert
that brings the log to N rows also moves the whole log, numbered and stamped per key, into the
versions' b-tree, trims the keys moved and empties the log, so that one `set`'s time holds the
move); `log, packed every N` (the same log moved into one row per key per move holding its
versions as a JSON array); `one table: versions in the row` (no second table at all: the
state row carries its previous versions, the one being replaced put in front of them by the
upsert itself and the whole cut at KEEP - 1 versions' worth of bytes, as a one-table layout
would; history off is the plain upsert on the same table); `interleaved: versions in the state
b-tree` (no second table either: the versions are rows of the state table's own b-tree, keyed
(namespace, key, version), the live row at the top number, beside its newest version).

Each variant prints its p50 and also its mean, p99 and max: a variant that defers work (the
log's move) shows it in the mean and the tail, not in the p50. The versions a log variant still
holds at the end are moved then and that move's time is added to its last `set` (so the mean
counts every version's move).

    .venv/bin/python bench/history_sqlite_statements.py [--ops 8000] [--rounds 5] [--only log,floor]
    .venv/bin/python bench/history_sqlite_statements.py --move-parts 4096 [--rounds 5]

`--move-parts N` times the log's move alone, statement by statement, per version moved.

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


# A time-ordered version log (issue 26's spike): the trigger appends each version to a rowid
# table (no number, no key order, no read); when the log reaches `n` rows (its rowid: the log
# starts over at 1 once emptied) the insert that reaches it moves them all, numbered and stamped
# per key, into the versions' b-tree in key order, trims the keys it moved and empties the log,
# inside that `set`'s statement (so that `set`'s time holds the whole move).
LOG = (
    "CREATE TABLE log (namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT, expires_at REAL, "
    "updated_at REAL NOT NULL, updated_by TEXT, op TEXT NOT NULL)"
)
TO_LOG = (
    "INSERT INTO log VALUES (new.namespace, new.key, new.value, new.expires_at, "
    "new.updated_at, new.updated_by, 'set')"
)
# Each key's number and stamp before the move (its newest kept version, or its mark), and how
# many versions it moves: one row per key the log holds.
_NEWEST_OF_D = (
    f"(SELECT {{column}} FROM {lite.VERSIONS} AS v WHERE v.namespace = d.namespace "
    "AND v.key = d.key ORDER BY version DESC LIMIT 1)"
)
_MOVING = (
    "(SELECT namespace, key, max(coalesce("
    f"{_NEWEST_OF_D.format(column='version')}, 0), coalesce((SELECT version FROM {lite.MARKS} AS m "
    "WHERE m.namespace = d.namespace AND m.key = d.key), 0)) AS base, "
    f"coalesce({_NEWEST_OF_D.format(column='updated_at')}, 0) AS stamp "
    "FROM log AS d GROUP BY namespace, key)"  # grouped: computed once per key, not per row
)
# The numbers and stamps are computed over (rowid, key) alone and joined back to the log's rows
# by rowid: sorting the whole rows (value, writer) for the window cost twice as much. The trim
# then deletes each moved key's versions past the number kept (a range of its primary key).
MOVE = (
    f"INSERT INTO {lite.VERSIONS} SELECT l.namespace, l.key, k.base + w.n, l.value, "
    "l.expires_at, max(k.stamp, w.at), l.updated_by, l.op FROM (SELECT rowid AS r, namespace, "
    "key, row_number() OVER w AS n, max(updated_at) OVER w AS at FROM log WINDOW w AS "
    "(PARTITION BY namespace, key ORDER BY rowid ROWS UNBOUNDED PRECEDING)) AS w "
    f"JOIN {_MOVING} AS k ON k.namespace = w.namespace AND k.key = w.key "
    "JOIN log AS l ON l.rowid = w.r; "
    f"DELETE FROM {lite.VERSIONS} WHERE (namespace, key, version) IN (SELECT v.namespace, v.key, "
    f"v.version FROM (SELECT DISTINCT namespace, key FROM log) AS d JOIN {lite.VERSIONS} AS v "
    "ON v.namespace = d.namespace AND v.key = d.key AND v.version <= "
    f"{_NEWEST_OF_D.format(column='version')} - taskstate_keep()); DELETE FROM log;"
)


# The same log moved into a packed table instead: one row per key per move holding that key's
# versions of the batch as a JSON array (a row per ~`n`/KEYS versions, not per version), keyed
# by its first number; the trim deletes whole rows past the number kept. A layout every history
# read would unpack: measured only to see what the b-tree's per-row cost leaves.
PACKED = (
    "CREATE TABLE packed (namespace TEXT NOT NULL, key TEXT NOT NULL, first INTEGER NOT NULL, "
    "last INTEGER NOT NULL, stamp REAL NOT NULL, versions TEXT NOT NULL, "
    "PRIMARY KEY (namespace, key, first)) WITHOUT ROWID"
)
_PACKED_NEWEST = (
    "(SELECT {column} FROM packed AS v WHERE v.namespace = d.namespace "
    "AND v.key = d.key ORDER BY first DESC LIMIT 1)"
)
MOVE_PACKED = (
    "INSERT INTO packed SELECT namespace, key, min(n), max(n), max(at), json_group_array("
    "json_array(n, value, expires_at, at, updated_by, op)) FROM (SELECT l.namespace, l.key, "
    "k.base + w.n AS n, l.value, l.expires_at, max(k.stamp, w.at) AS at, l.updated_by, l.op "
    + MOVE.partition(" l.op ")[2]
    .partition(";")[0]
    .replace(f"{lite.VERSIONS} AS v", "packed AS v")
    .replace("ORDER BY version DESC", "ORDER BY first DESC")
    .replace("SELECT version FROM packed", "SELECT last FROM packed")
    .replace("SELECT updated_at FROM packed", "SELECT stamp FROM packed")
    + " ORDER BY l.namespace, l.key, w.n) GROUP BY namespace, key; "
    "DELETE FROM packed WHERE (namespace, key, first) IN (SELECT v.namespace, v.key, v.first "
    "FROM (SELECT DISTINCT namespace, key FROM log) AS d JOIN packed AS v ON v.namespace = "
    f"d.namespace AND v.key = d.key AND v.last <= {_PACKED_NEWEST.format(column='last')} - "
    "taskstate_keep()); DELETE FROM log;"
)


def log_variant(conn: sqlite3.Connection, n: int, packed: bool = False) -> Callable[[int], None]:
    """One `set` of key i % KEYS with its version appended to the log, moved every `n`."""
    conn.execute(LOG)
    conn.execute(PACKED)
    run = variant(conn, TO_LOG, trim=False)  # registers taskstate_keep(), which MOVE calls
    move = MOVE_PACKED if packed else MOVE
    conn.execute(f"CREATE TRIGGER move AFTER INSERT ON log WHEN new.rowid >= {n} BEGIN {move} END")
    return run


class Flags:
    """What the trigger functions read, as `_Versioning` holds it."""

    on = False
    keep = KEEP


# The one-table layout: the previous version (the row before the upsert: SQLite evaluates every
# SET expression against it) goes in front of the versions the row already carries.
INLINE_SET = lite._SET.replace(
    "updated_by = excluded.updated_by",
    "updated_by = excluded.updated_by, hist = substr(CAST(json_array(value, expires_at, "
    "updated_at, updated_by, 'set') || char(30) AS BLOB) || hist, 1, "
    f"{KEEP - 1} * (length(value) + length(updated_by) + 60))",
)
assert INLINE_SET != lite._SET, "the upsert changed"


def inline_variant(conn: sqlite3.Connection) -> Callable[[int], None]:
    """One `set` of key i % KEYS on a state table that carries its versions in the row."""
    conn.execute(f"ALTER TABLE {lite.TABLE} ADD COLUMN hist BLOB NOT NULL DEFAULT x''")

    def run(i: int) -> None:
        now = 1e9 + i
        conn.execute(
            INLINE_SET, (NAMESPACE, f"k{i % KEYS}", json.dumps({"n": i}), now + 1e6, now, BY)
        )

    return run


# Interleaved: no second table; the versions are rows of the state table's own b-tree, keyed
# (namespace, key, version), the live row at the top number LIVE so that it sits beside its
# newest version (one leaf page for the write and its version, as a rule). The expiry index
# holds the live rows alone (a partial index); the trigger numbers as `now` does (newest kept
# version, else the mark) and trims every 16th number.
LIVE = 2**63 - 1
MIXED = (
    "CREATE TABLE mixed (namespace TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, "
    "value TEXT, expires_at REAL, updated_at REAL NOT NULL, updated_by TEXT, op TEXT, "
    "PRIMARY KEY (namespace, key, version)) WITHOUT ROWID; "
    f"CREATE INDEX mixed_expires ON mixed (expires_at) WHERE version = {LIVE} "
    "AND expires_at IS NOT NULL;"
)
MIXED_SET = (
    "INSERT INTO mixed (namespace, key, version, value, expires_at, updated_at, updated_by) "
    f"VALUES (?, ?, {LIVE}, ?, ?, ?, ?) ON CONFLICT (namespace, key, version) DO UPDATE SET "
    "value = excluded.value, expires_at = excluded.expires_at, "
    "updated_at = excluded.updated_at, updated_by = excluded.updated_by"
)
MIXED_NEWEST = (
    "(SELECT {column} FROM mixed WHERE namespace = new.namespace AND key = new.key "
    f"AND version < {LIVE} ORDER BY version DESC LIMIT 1)"
)
MIXED_BODY = (
    "INSERT INTO mixed VALUES (new.namespace, new.key, 1 + max(coalesce("
    f"{MIXED_NEWEST.format(column='version')}, 0), coalesce((SELECT version FROM "
    f"{lite.MARKS} WHERE namespace = new.namespace AND key = new.key), 0)), new.value, "
    f"new.expires_at, max(new.updated_at, coalesce({MIXED_NEWEST.format(column='updated_at')}, "
    "new.updated_at)), new.updated_by, 'set')"
)
MIXED_TRIGGERS = [
    *(
        f"CREATE TRIGGER mixed_{event} AFTER {event.upper()} ON mixed WHEN new.version = {LIVE} "
        f"AND taskstate_versioning() BEGIN {MIXED_BODY}; END"
        for event in ("insert", "update")
    ),
    f"CREATE TRIGGER mixed_trim AFTER INSERT ON mixed WHEN new.version < {LIVE} "
    f"AND new.version % 16 = 0 BEGIN DELETE FROM mixed WHERE namespace = new.namespace "
    f"AND key = new.key AND version <= new.version - {KEEP}; END",
]


def mixed_variant(conn: sqlite3.Connection) -> Callable[[int], None]:
    """One `set` of key i % KEYS on a state table whose b-tree holds the versions too."""
    flags = Flags()
    conn.create_function("taskstate_versioning", 0, lambda: flags.on)
    conn.executescript(MIXED)
    for statement in MIXED_TRIGGERS:
        conn.execute(statement)

    def run(i: int) -> None:
        now = 1e9 + i
        flags.on = True
        try:
            conn.execute(
                MIXED_SET, (NAMESPACE, f"k{i % KEYS}", json.dumps({"n": i}), now + 1e6, now, BY)
            )
        finally:
            flags.on = False

    return run


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


LOG_OF_KEY = (
    "SELECT rowid, value, expires_at, updated_at, updated_by, op FROM log "
    "WHERE namespace = ? AND key = ? ORDER BY rowid DESC"
)


def move_parts(folder: str, n: int, rounds: int) -> None:
    """The log's move statement by statement, per version moved: `n` versions (the bench's keys
    and values) logged untimed, then each statement of MOVE and the COMMIT timed as CPU; also
    the insert at numbers known in advance (no window, no key reads) for the b-tree's own cost,
    and before each move a read of each key's versions in the full log (what history reads add)."""
    conn = database(folder, "parts")
    conn.execute(LOG)
    conn.create_function("taskstate_keep", 0, lambda: KEEP)
    insert, trim, empty = (part.strip() for part in MOVE.split(";")[:3])
    known = (
        f"INSERT INTO {lite.VERSIONS} SELECT namespace, key, CAST((updated_at - 1e9) / {KEYS} "
        "AS INTEGER) + 1, value, expires_at, updated_at, updated_by, op FROM log "
        "ORDER BY namespace, key, rowid"
    )
    parts: dict[str, list[float]] = {}
    reads: list[int] = []
    for r in range(rounds + 2):  # the first two fill the keys' pages: not counted
        insert_as = known if r % 2 else insert  # alternate rounds: numbered, known numbers
        conn.execute("BEGIN")
        for i in range(r * n, (r + 1) * n):
            now = 1e9 + i
            conn.execute(
                "INSERT INTO log VALUES (?, ?, ?, ?, ?, ?, 'set')",
                (NAMESPACE, f"k{i % KEYS}", json.dumps({"n": i}), now + 1e6, now, BY),
            )
        conn.execute("COMMIT")
        for k in range(KEYS):  # what each history read would add: a key's versions in the log
            t0 = time.thread_time_ns()
            conn.execute(LOG_OF_KEY, (NAMESPACE, f"k{k}")).fetchall()
            if r >= 2:
                reads.append(time.thread_time_ns() - t0)
        conn.execute("BEGIN")
        names = ("numbered insert" if insert_as is insert else "insert, numbers known", "trim")
        for name, statement in (*zip(names, (insert_as, trim), strict=True), ("empty", empty),
                                ("commit", "COMMIT")):  # fmt: skip
            t0 = time.thread_time_ns()
            conn.execute(statement)
            if r >= 2:
                parts.setdefault(name, []).append((time.thread_time_ns() - t0) / n)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    print(f"the log's move of {n} versions ({KEYS} keys), CPU per version moved, median of rounds:")
    for name, times in parts.items():
        print(f"  {name:22s} {statistics.median(times) / 1e3:.2f} us ({len(times)} rounds)")
    p99 = statistics.quantiles(reads, n=100)[-1]
    print(
        f"a key's versions read from the log of {n} rows (a scan): CPU p50 "
        f"{statistics.median(reads) / 1e3:.0f} us, p99 {p99 / 1e3:.0f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only",
        default="",
        help="only the variants whose names hold one of these (comma-separated), and off",
    )
    parser.add_argument(
        "--move-parts", type=int, metavar="N", help="time the log's move of N versions instead"
    )
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="taskstate-history-sqlite-")
    if args.move_parts:
        move_parts(folder, args.move_parts, args.rounds * 2)
        return
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
    logs = {f"log, moved every {n}": (n, False) for n in (256, 1024, 4096)}
    logs |= {f"log, packed every {n}": (n, True) for n in (1024, 4096)}
    only = args.only.split(",")
    sides = {k: v for k, v in sides.items() if k == "off" or any(o in k for o in only)}
    logs = {k: v for k, v in logs.items() if any(o in k for o in only)}
    runs, conns = {}, {}
    for n, (name, (body, page_size, trim)) in enumerate(sides.items()):
        conns[name] = database(folder, str(n), page_size)
        runs[name] = variant(conns[name], body, trim)
    for n, (name, (every, packed)) in enumerate(logs.items(), len(sides)):
        conns[name] = database(folder, str(n))
        runs[name] = log_variant(conns[name], every, packed)
    inline = "one table: versions in the row"
    if any(o in inline for o in only):
        conns[inline] = database(folder, "inline")
        runs[inline] = inline_variant(conns[inline])
    mixed = "interleaved: versions in the state b-tree"
    if any(o in mixed for o in only):
        conns[mixed] = database(folder, "mixed")
        runs[mixed] = mixed_variant(conns[mixed])
    frames = dict.fromkeys(runs, 0)
    load = os.getloadavg()
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    p50s: dict[str, list[float]] = {name: [] for name in runs}
    every: dict[str, list[int]] = {name: [] for name in runs}
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
            every[name] += times[name]
    print(
        f"load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; {args.ops} sets x {args.rounds} rounds "
        f"per variant, {KEYS} keys, {KEEP} versions kept, 1 thread; CPU per set"
    )
    total = args.ops * args.rounds // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    for name, (_, packed) in logs.items():  # the versions still in the log: their move counts
        t0 = time.thread_time_ns()
        conns[name].executescript(f"BEGIN; {MOVE_PACKED if packed else MOVE} COMMIT;")
        every[name][-1] += time.thread_time_ns() - t0
    off_mean = statistics.fmean(every["off"])
    for name in runs:
        mean = statistics.fmean(every[name])
        print(
            f"{name:36s} p50 {statistics.median(p50s[name]) / 1e3:6.2f} us "
            f"({statistics.median(ratios[name]):.2f}x off; rounds "
            f"{min(ratios[name]):.2f}-{max(ratios[name]):.2f}); mean "
            f"{mean / 1e3:6.2f} us ({mean / off_mean:.2f}x); "
            f"p99 {statistics.quantiles(every[name], n=100)[-1] / 1e3:.0f}, "
            f"max {max(every[name]) / 1e3:.0f} us; "
            f"{frames[name] / total:.2f} pages per commit"
        )


if __name__ == "__main__":
    main()
