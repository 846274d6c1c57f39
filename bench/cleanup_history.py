"""What history costs `clean`: the deletion of N expired task rows with history on (each
deletion recorded as an `expire` version) against history off, same store kind, same run, the
two sides taking turns round by round on stores seeded alike. Two seedings: rows loaded
straight into the table (what the `versus` run's cleanup does: the keys have no versions yet),
and rows that already hold a version each (what a store written with history on holds).

    .venv/bin/python bench/cleanup_history.py [--rows 100000] [--rounds 3]
        [--backends sqlite,postgres] [--batch 0]

Prints the deletion as `clean` times it (`CleanupResult.seconds`), the whole cleanup (with the
version pruning that follows), and the on/off ratio of each; the load at the start and the end.
No assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from record import meta, save
from side_urls import side_urls
from tests.expired_rows import load_rows

from taskstate import StateStore, TaskScope
from taskstate.backends import postgres
from taskstate.backends.postgres import conninfo_from_url
from taskstate.backends.sqlite import MARKS, TABLE, VERSIONS, path_from_url
from taskstate.settings import Settings

SIDES = {"on": 20, "off": 0}  # history_versions: the default, and history off


def expired_rows(n: int, now: float) -> list[tuple[str, str, str, float, float]]:
    value = '{"cursor":12345}'
    return [
        (TaskScope(f"dag{i % 50}", f"run{i // 1000}", "task").namespace, f"k{i}", value,
         now - 3600, now - 86400)
        for i in range(n)
    ]  # fmt: skip


TABLES = (TABLE, VERSIONS, MARKS)  # the same names on both backends
assert TABLES == (postgres.TABLE, postgres.VERSIONS, postgres.MARKS)
VERSION_COLUMNS = "namespace, key, version, value, expires_at, updated_at, updated_by, op"
WITH_VERSIONS = (
    f"INSERT INTO {VERSIONS} ({VERSION_COLUMNS}) SELECT namespace, key, 1, value, expires_at, "
    f"updated_at, NULL, 'set' FROM {TABLE}",
    f"INSERT INTO {MARKS} (namespace, key, version) SELECT namespace, key, 1 FROM {TABLE}",
)


def run(url: str, statements: list[str]) -> None:
    """The statements on the store at `url`, each committed; on PostgreSQL the tables are then
    vacuumed and analysed, so each round starts from the same pages and plans."""
    if url.startswith("sqlite"):
        with sqlite3.connect(path_from_url(url), isolation_level=None) as lite:
            for statement in statements:
                lite.execute(statement)
        return
    with psycopg.connect(conninfo_from_url(url), autocommit=True) as pg:
        for statement in statements:
            pg.execute(statement)
        for table in TABLES:
            pg.execute(f"VACUUM ANALYZE {table}")


def one_round(url: str, versions: int, rows: int, seeded: str, batch: int) -> tuple[float, float]:
    """Seed `rows` expired rows into the emptied store at `url`; (deletion, whole cleanup) s."""
    settings = dataclasses.replace(Settings(), history_versions=versions)
    with StateStore(url, settings=settings) as store:
        store.migrate()
        run(url, [f"DELETE FROM {table}" for table in TABLES])  # the round before's too
        now = time.time()
        load_rows(url, expired_rows(rows, now))
        if seeded == "with a version each":
            run(url, list(WITH_VERSIONS))
        started = time.perf_counter()
        result = store.cleanup(batch_size=batch)
        whole = time.perf_counter() - started
    if result.deleted != rows:
        raise RuntimeError(f"{url}: deleted {result.deleted} of {rows}")
    return result.seconds, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--batch", type=int, default=0, help="cleanup batch size (0: default)")
    args = parser.parse_args()
    started = meta()
    figures: dict[str, dict[str, float]] = {}
    print(f"load at start {os.getloadavg()[0]:.2f}; {args.rows:,} expired rows per round")
    for kind in args.backends.split(","):
        with side_urls(kind, tuple(SIDES), prefix="ch") as urls:
            for seeded in ("loaded, no versions", "with a version each"):
                taken: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
                for r in range(args.rounds):
                    order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
                    for side in order:
                        taken[side].append(
                            one_round(urls[side], SIDES[side], args.rows, seeded, args.batch)
                        )
                med = {
                    side: tuple(statistics.median(t[i] for t in taken[side]) for i in (0, 1))
                    for side in SIDES
                }
                on, off = med["on"], med["off"]
                figures[f"{kind}, {seeded}"] = {
                    "deletion_on_s": on[0], "deletion_off_s": off[0],
                    "whole_on_s": on[1], "whole_off_s": off[1],
                }  # fmt: skip
                print(
                    f"{kind:8} {seeded:22} deletion on {on[0] * 1000:8.1f} ms  off "
                    f"{off[0] * 1000:8.1f} ms  {on[0] / off[0]:5.2f}x | whole cleanup on "
                    f"{on[1] * 1000:8.1f} ms  off {off[1] * 1000:8.1f} ms  {on[1] / off[1]:5.2f}x"
                )
    print(f"load at end {os.getloadavg()[0]:.2f}")
    command = " ".join(["bench/cleanup_history.py", *sys.argv[1:]])
    save("cleanup_history", {"rows": args.rows, **figures}, command=command, started=started)


if __name__ == "__main__":
    main()
