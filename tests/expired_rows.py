"""Bulk-load a store with expired task rows (and rows cleanup must keep), straight through each
driver's fastest path: the cleanup scale test and bench/cleanup_scale.py share it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

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
    if url.startswith("sqlite"):
        conn = sqlite3.connect(path_from_url(url), isolation_level=None)
        conn.execute("BEGIN")
        conn.executemany(
            f"INSERT INTO taskstate_entries ({COLUMNS}) VALUES (?, ?, ?, ?, ?)", rows(expired, now)
        )
        conn.execute("COMMIT")
        conn.close()
        return
    import psycopg

    from taskstate.backends.postgres import conninfo_from_url

    with psycopg.connect(conninfo_from_url(url)) as pg, pg.cursor() as cur:
        with cur.copy(f"COPY taskstate_entries ({COLUMNS}) FROM STDIN") as copy:
            for row in rows(expired, now):
                copy.write_row(row)
        cur.execute("ANALYZE taskstate_entries")
