"""The embedded default: one SQLite file in WAL mode, shared by every process on the machine.

Each thread of each process gets its own connection (reopened after fork). Every plain write
is one autocommit statement; read-modify-write runs under `BEGIN IMMEDIATE`, which takes the
file's write lock up front so concurrent updaters queue (busy_timeout) instead of failing.
WAL with synchronous=NORMAL loses nothing when the writing process is killed: a committed
transaction is in the WAL before `set` returns. (An OS crash or power cut can lose the last
commits; `synchronous=FULL` via `?synchronous=full` in the URL trades speed for that.)
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from taskstate.backends.base import (
    Entry,
    Row,
    SchemaStatus,
    StateBackend,
    prefix_upper_bound,
)
from taskstate.errors import BackendError, ConfigError

T = TypeVar("T")

TABLE = "taskstate_entries"

_HEX32 = "[0-9a-f]" * 32

# Forward-only; version N is MIGRATIONS[N - 1]. Never edit a released entry, append one.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE IF NOT EXISTS {TABLE} (
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        expires_at REAL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS {TABLE}_expires
        ON {TABLE} (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # 2: who wrote each row last (the API's `last_updated_by`); NULL for older rows. And an
    # offload reference, once a JSON object a user value could mimic, becomes "@taskstate-ref:…"
    # (no JSON text starts with "@").
    f"""
    ALTER TABLE {TABLE} ADD COLUMN updated_by TEXT;
    UPDATE {TABLE} SET value = '@taskstate-ref:' || substr(value, 23, 98)
        WHERE value GLOB '{{"__taskstate_ref__":"{_HEX32}/{_HEX32}/{_HEX32}"}}'
    """,
]

_GET = f"SELECT value, expires_at, updated_by FROM {TABLE} WHERE namespace = ? AND key = ?"
_SET = (
    f"INSERT INTO {TABLE} (namespace, key, value, expires_at, updated_at, updated_by) "
    "VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
    "expires_at = excluded.expires_at, updated_at = excluded.updated_at, "
    "updated_by = excluded.updated_by"
)
_CREATE = _SET.partition(" ON CONFLICT")[0] + " ON CONFLICT (namespace, key) DO NOTHING"
_DELETE = f"DELETE FROM {TABLE} WHERE namespace = ? AND key = ?"
_CLEAR = f"DELETE FROM {TABLE} WHERE namespace = ?"
_CLEAR_RANGE = f"DELETE FROM {TABLE} WHERE namespace >= ? AND namespace < ?"
_COLUMNS = "namespace, key, value, expires_at, updated_at, updated_by"
_SCAN_ALL = f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY 1, 2"
_SCAN_RANGE = f"SELECT {_COLUMNS} FROM {TABLE} WHERE namespace >= ? AND namespace < ? ORDER BY 1, 2"
_COUNT_EXPIRED = f"SELECT count(*) FROM {TABLE} WHERE expires_at <= ?"
_DELETE_EXPIRED = f"DELETE FROM {TABLE} WHERE expires_at <= ?"
# Bounded: one bound parameter however large the batch (stock SQLite caps variables at 999/32766).
_DELETE_EXPIRED_BATCH = (
    f"DELETE FROM {TABLE} WHERE (namespace, key) IN "
    f"(SELECT namespace, key FROM {TABLE} WHERE expires_at <= ? LIMIT ?)"
)


def path_from_url(url: str) -> Path:
    """`sqlite:///relative/path.db` or `sqlite:////absolute/path.db` (SQLAlchemy's form)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or not parts.path.startswith("/") or parts.path == "/":
        raise ConfigError(
            f"not a SQLite URL: {url!r}; write sqlite:///relative.db or sqlite:////abs/path.db"
        )
    return Path(unquote(parts.path[1:]))


class SQLiteBackend(StateBackend):
    def __init__(self, url: str, *, busy_timeout_s: float = 60.0) -> None:
        self.url = url
        self.path = path_from_url(url)
        options = {k: v[-1].lower() for k, v in parse_qs(urlsplit(url).query).items()}
        self._synchronous = options.get("synchronous", "normal")
        if self._synchronous not in ("normal", "full", "extra"):
            raise ConfigError(f"synchronous must be normal, full or extra in {url!r}")
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._migrated = False

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            return conn
        conn = self._open()
        if not self._migrated:
            # The embedded default creates its own schema on first use; there is no server
            # to migrate ahead of time.
            self._migrate_on(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
            )
            self._enable_wal(conn)
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open the state database {self.path}: {exc}") from exc
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs an exclusive lock and SQLite does not run the busy
        # handler for it, so processes opening a fresh file at once must wait here themselves.
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()

    def get(self, namespace: str, key: str) -> Entry | None:
        row = self._conn().execute(_GET, (namespace, key)).fetchone()
        return None if row is None else Entry(*row)

    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        self._conn().execute(_SET, (namespace, key, value, expires_at, now, updated_by))

    def delete(self, namespace: str, key: str) -> None:
        self._conn().execute(_DELETE, (namespace, key))

    def clear(self, namespace: str) -> int:
        return self._conn().execute(_CLEAR, (namespace,)).rowcount

    def clear_prefix(self, prefix: str) -> int:
        if not prefix:
            return self._conn().execute(f"DELETE FROM {TABLE}").rowcount
        return self._conn().execute(_CLEAR_RANGE, (prefix, prefix_upper_bound(prefix))).rowcount

    def transact(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Entry | None], tuple[Entry | None, T]],
        now: float,
    ) -> T:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(_GET, (namespace, key)).fetchone()
            new, result = fn(None if row is None else Entry(*row))
            if new is not None:
                conn.execute(_SET, (namespace, key, new.value, new.expires_at, now, new.updated_by))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def set_many(self, rows: list[Row], *, replace: bool = True) -> int:
        conn = self._conn()
        params = [
            (r.namespace, r.key, r.value, r.expires_at, r.updated_at, r.updated_by) for r in rows
        ]
        conn.execute("BEGIN IMMEDIATE")
        try:
            written = conn.executemany(_SET if replace else _CREATE, params).rowcount
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return written

    def scan(self, prefix: str = "") -> Iterator[Row]:
        conn = self._conn()
        cursor = (
            conn.execute(_SCAN_RANGE, (prefix, prefix_upper_bound(prefix)))
            if prefix
            else conn.execute(_SCAN_ALL)
        )
        for row in cursor:
            yield Row(*row)

    def count_expired(self, now: float) -> int:
        return int(self._conn().execute(_COUNT_EXPIRED, (now,)).fetchone()[0])

    def delete_expired(self, now: float, limit: int) -> int:
        conn = self._conn()
        if limit <= 0:
            return conn.execute(_DELETE_EXPIRED, (now,)).rowcount
        return conn.execute(_DELETE_EXPIRED_BATCH, (now, limit)).rowcount

    def schema_status(self) -> SchemaStatus:
        return SchemaStatus(_user_version(self._conn()), len(MIGRATIONS))

    def migrate(self) -> list[int]:
        local = self._local
        conn = local.conn if getattr(local, "conn", None) and local.pid == os.getpid() else None
        return self._migrate_on(conn or self._open(), explicit=True)

    def _migrate_on(self, conn: sqlite3.Connection, *, explicit: bool = False) -> list[int]:
        """Bring the schema up to date. A newer schema (a newer taskstate is rolling out) is
        read and written as is, like the PostgreSQL backend does; only `migrate` refuses it."""
        applied: list[int] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = _user_version(conn) or 0
            if current > len(MIGRATIONS) and explicit:
                raise BackendError(
                    f"{self.path} has schema version {current}, newer than this taskstate "
                    f"knows ({len(MIGRATIONS)}); upgrade taskstate"
                )
            for version in range(current + 1, len(MIGRATIONS) + 1):
                for statement in MIGRATIONS[version - 1].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                applied.append(version)
            if applied:
                conn.execute(f"PRAGMA user_version = {applied[-1]}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._migrated = True
        return applied


def _user_version(conn: sqlite3.Connection) -> int | None:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    return version or None
