"""Bulk-load a store straight through each driver's fastest path (`load_rows`), and the expired
task rows (with rows cleanup must keep) the cleanup scale test and bench/cleanup_scale.py use."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator

from taskstate.backends.sqlite import path_from_url
from taskstate.scope import AssetScope, TaskScope

Row = tuple[str, str, str, "float | None", float]

# Named: later schema versions add columns (updated_by) that a bulk load leaves NULL.
COLUMNS = "namespace, key, value, expires_at, updated_at"
KEPT_EACH = 1000  # NEVER_EXPIRE task rows, asset rows, and not-yet-expired task rows


def rows(expired: int, now: float) -> Iterator[Row]:
    """`expired` task rows past their expiry, then KEPT_EACH of each kind cleanup must keep."""
    value = '{"cursor":12345,"file":"s3://bucket/part-0001.parquet"}'
    for i in range(expired):
        ns = TaskScope(f"dag{i % 50}", f"run{i // 20000}", "task", i % 10).namespace
        yield ns, f"key{i}", value, now - 3600 - i % 1000, now - 86400
    for i in range(KEPT_EACH):
        task = TaskScope(f"dag{i % 50}", "kept", "task").namespace
        yield task, f"never{i}", value, None, now
        yield task, f"fresh{i}", value, now + 86400, now
        yield AssetScope(name=f"asset{i % 10}").namespace, f"key{i}", value, None, now - 86400


def load(url: str, expired: int, now: float) -> None:
    """Write the rows into a migrated, empty store at `url`."""
    load_rows(url, rows(expired, now))


def load_rows(url: str, rows: Iterable[Row], *, batch: int = 100_000) -> None:
    """Write `rows` into a migrated store at `url`: SQLite `executemany` in transactions of
    `batch` rows, PostgreSQL `COPY`; then ANALYZE (so plans see the real sizes)."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(path_from_url(url), isolation_level=None)
        insert = f"INSERT INTO taskstate_entries ({COLUMNS}) VALUES (?, ?, ?, ?, ?)"
        it = iter(rows)
        while chunk := list(itertools.islice(it, batch)):
            conn.execute("BEGIN")
            conn.executemany(insert, chunk)
            conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.close()
        return
    import psycopg

    from taskstate.backends.postgres import conninfo_from_url

    with psycopg.connect(conninfo_from_url(url)) as pg, pg.cursor() as cur:
        with cur.copy(f"COPY taskstate_entries ({COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cur.execute("ANALYZE taskstate_entries")
