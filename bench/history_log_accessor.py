"""Issue 26's time-ordered version log through the accessor, on SQLite: `set` with history off,
with history on as built (the versioning trigger), and with the trigger swapped for the log of
`history_sqlite_statements.py` (each version appended to a rowid table; the insert that brings
it to N rows moves the whole log, numbered and stamped per key, into the versions table and
trims the keys moved, inside that `set`), each on its own SQLite file, one `set` of each side in
turn, timed as this thread's CPU (SQLite runs on the calling thread). Per side the p50, the mean,
the p99 and the max; the versions a log side still holds at the end are moved then and that
move's time added to its last `set`, so its mean counts every version's move. Only `set` is
measured: nothing of the store reads the log (this is a spike, not a built store).

    .venv/bin/python bench/history_log_accessor.py [--ops 8000] [--rounds 5]

Prints the load (os.getloadavg) at the start and the end; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from history_sqlite_statements import LOG, MOVE, TO_LOG

from taskstate import StateStore, TaskScope, TaskStateStore
from taskstate.backends import sqlite as lite
from taskstate.settings import Settings

KEYS = 100


def side(folder: str, name: str, versions: int, log_every: int | None) -> TaskStateStore:
    """A task accessor on its own file; with `log_every`, its connection's versioning trigger
    replaced by the log's (the same TEMP trigger names, so the store never reinstalls them)."""
    settings = dataclasses.replace(Settings(), history_versions=versions)
    store = StateStore(f"sqlite:///{folder}/{name}.db", settings=settings)
    store.migrate()
    state = store.task_state(TaskScope("bench", "log", "task"))
    state.set("warm", 0)  # installs the connection's versioning trigger
    if log_every is not None:
        backend = store.backend
        assert isinstance(backend, lite.SQLiteBackend)
        conn = backend._conn()
        conn.execute(LOG)
        for trigger in ("insert", "update", "trim"):
            conn.execute(f"DROP TRIGGER temp.taskstate_versioning_{trigger}")
        for event in ("insert", "update"):
            conn.execute(
                f"CREATE TEMP TRIGGER taskstate_versioning_{event} AFTER {event.upper()} ON "
                f"{lite.TABLE} WHEN taskstate_versioning() BEGIN {TO_LOG}; END"
            )
        conn.execute(
            f"CREATE TEMP TRIGGER taskstate_log_move AFTER INSERT ON main.log "
            f"WHEN new.rowid >= {log_every} BEGIN {MOVE} END"
        )
    return state


def flush(state: TaskStateStore) -> int:
    """Move what the log still holds (its time in thread CPU ns)."""
    backend = state._store.backend
    assert isinstance(backend, lite.SQLiteBackend)
    conn: sqlite3.Connection = backend._conn()
    t0 = time.thread_time_ns()
    backend._versioning(conn).keep = backend.history_versions  # what MOVE's trim reads
    conn.executescript(f"BEGIN; {MOVE} COMMIT;")
    return time.thread_time_ns() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskstate-history-log-") as folder:
        run(folder, args.ops, args.rounds)


def run(folder: str, ops: int, rounds: int) -> None:
    sides = {
        "off": side(folder, "off", 0, None),
        "on (the trigger)": side(folder, "on", 20, None),
        "log, moved every 1024": side(folder, "log1024", 20, 1024),
        "log, moved every 4096": side(folder, "log4096", 20, 4096),
    }
    load = os.getloadavg()
    times: dict[str, list[int]] = {name: [] for name in sides}
    p50s: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for i in range(r * ops, (r + 1) * ops):
            for name, state in sides.items():
                t0 = time.thread_time_ns()
                state.set(f"k{i % KEYS}", {"n": i})
                times[name].append(time.thread_time_ns() - t0)
        for name in sides:
            p50s[name].append(statistics.median(times[name][-ops:]))
    kept = {}
    for name, state in sides.items():
        if name.startswith("log"):
            times[name][-1] += flush(state)
        if name != "off":  # every version moved and trimmed: KEYS x (20 .. 20 + the last batch)
            conn = state._store.backend._conn()  # type: ignore[attr-defined]
            kept[name] = conn.execute(f"SELECT count(*) FROM {lite.VERSIONS}").fetchone()[0]
    print(
        f"load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; {ops} sets x {rounds} rounds "
        f"per side, {KEYS} keys, 20 versions kept, 1 thread; CPU per set through the accessor"
    )
    off_mean = statistics.fmean(times["off"])
    for name in sides:
        ratios = [p / off for p, off in zip(p50s[name], p50s["off"], strict=True)]
        mean = statistics.fmean(times[name])
        print(
            f"{name:24s} p50 {statistics.median(p50s[name]) / 1e3:6.2f} us "
            f"({statistics.median(ratios):.2f}x off; rounds {min(ratios):.2f}-{max(ratios):.2f}); "
            f"mean {mean / 1e3:6.2f} us ({mean / off_mean:.2f}x); "
            f"p99 {statistics.quantiles(times[name], n=100)[-1] / 1e3:.0f}, "
            f"max {max(times[name]) / 1e3:.0f} us"
            + (f"; {kept[name]} versions kept at the end" if name in kept else "")
        )


if __name__ == "__main__":
    main()
