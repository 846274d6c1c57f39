"""PostgreSQL backend: the shared database a multi-machine Airflow already has.

psycopg 3 with a small pool, opened lazily in each process (a forked child opens its own and
never touches the parent's sockets). Every get/set/delete is one prepared statement on an
autocommit connection: one round trip. Read-modify-write (`transact`) locks the row with
`SELECT ... FOR UPDATE`; a key that does not exist yet is created with
`INSERT ... ON CONFLICT DO NOTHING`, and if a concurrent writer created it first the transaction
starts over, now locking that writer's row. Row locks only, so writers of other keys never wait,
and no isolation-level retry loop is needed.

Transient failures (server restart, dropped connection, "starting up", crash recovery) are
retried with exponential backoff for a bounded window, then raise `BackendUnavailableError`
naming the server. What is transient is decided by the phase and the SQLSTATE class: while
connecting, only the answers listed in `_TRANSIENT_CONNECT` (refused, timed out, starting up,
too many clients...); once connected, a lost connection or a SQLSTATE of class 08, 40, 53 or
57P0x. Everything else (a wrong password, an unknown host, an invalid port, "index row size
exceeds btree maximum", a syntax error) is a `BackendError` at once, with the server's words.
Plain writes are idempotent, so they are retried even when the failure hides whether they
committed. `transact` is retried only when it certainly did not commit (the failure came before
COMMIT was sent); a connection lost during COMMIT raises instead of risking a second increment.

Tables carry a `taskstate_` prefix, so they can live in Airflow's metadata database beside
Airflow 3.3's `task_state_store` / `asset_state_store`. The schema is created by
`taskstate db migrate` (never implicitly: the metadata DB belongs to the Airflow admin).
"""

from __future__ import annotations

import functools
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from taskstate.backends.backoff import Backoff
from taskstate.backends.base import (
    Entry,
    Row,
    SchemaStatus,
    StateBackend,
    prefix_upper_bound,
)
from taskstate.errors import BackendError, BackendUnavailableError, ConfigError, SchemaMissingError
from taskstate.redaction import redact_url, scrub, url_secrets

T = TypeVar("T")

TABLE = "taskstate_entries"
VERSION_TABLE = "taskstate_schema_version"

_HEX32 = "[0-9a-f]{32}"

# Forward-only; version N is MIGRATIONS[N - 1]. Never edit a released entry, append one.
# COLLATE "C": byte order, so a namespace prefix is an index range scan (and matches SQLite).
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE {TABLE} (
        namespace  text COLLATE "C" NOT NULL,
        key        text COLLATE "C" NOT NULL,
        value      text NOT NULL,
        expires_at double precision,
        updated_at double precision NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE INDEX {TABLE}_expires ON {TABLE} (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # 2: who wrote each row last (the API's `last_updated_by`); NULL for older rows. And an
    # offload reference, once a JSON object a user value could mimic, becomes "@taskstate-ref:…"
    # (no JSON text starts with "@").
    f"""
    ALTER TABLE {TABLE} ADD COLUMN updated_by text;
    UPDATE {TABLE} SET value = '@taskstate-ref:' || substr(value, 23, 98)
        WHERE value ~ '^\\{{"__taskstate_ref__":"{_HEX32}/{_HEX32}/{_HEX32}"\\}}$';
    """,
    # 3: a b-tree entry is at most ~2700 bytes, and a namespace + key can be more (a 1500-char
    # asset name in a 4-byte script is 6000), which failed with "index row size exceeds btree
    # maximum". The identity becomes the fixed-size hashes of both (a real primary key, so
    # replication keeps working); order and prefix ranges use the first 200 characters of
    # the namespace (at most 800 bytes). Rows stay as they are.
    f"""
    ALTER TABLE {TABLE}
        ADD COLUMN namespace_md5 uuid GENERATED ALWAYS AS (md5(namespace)::uuid) STORED,
        ADD COLUMN key_md5 uuid GENERATED ALWAYS AS (md5(key)::uuid) STORED;
    ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey, ADD PRIMARY KEY (namespace_md5, key_md5);
    CREATE INDEX {TABLE}_order ON {TABLE} ((left(namespace, 200)));
    """,
]

# Serialises concurrent `migrate()` calls (pg_advisory_xact_lock key; "tsdb" in ASCII).
_MIGRATION_LOCK = 0x74736462
_CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
    "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)
_CURRENT_VERSION = f"SELECT max(version) FROM {VERSION_TABLE}"

# One key, found through the primary key; parameters (namespace, key).
_KEY = "(namespace_md5, key_md5) = (md5(%s)::uuid, md5(%s)::uuid)"
_GET = f"SELECT value, expires_at, updated_by, updated_at FROM {TABLE} WHERE {_KEY}"
_LOCK = _GET + " FOR UPDATE"
_INSERT = (
    f"INSERT INTO {TABLE} (namespace, key, value, expires_at, updated_at, updated_by) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (namespace_md5, key_md5) DO "
)
_SET = _INSERT + (
    "UPDATE SET value = excluded.value, expires_at = excluded.expires_at, "
    "updated_at = excluded.updated_at, updated_by = excluded.updated_by"
)
_CREATE = _INSERT + "NOTHING"
_UPDATE = (
    f"UPDATE {TABLE} SET value = %s, expires_at = %s, updated_at = %s, updated_by = %s WHERE {_KEY}"
)
_DELETE = f"DELETE FROM {TABLE} WHERE {_KEY}"
_DELETE_IF = (
    _DELETE + " AND value = %s AND expires_at IS NOT DISTINCT FROM %s"
    " AND updated_by IS NOT DISTINCT FROM %s AND updated_at = %s"
)
_CLEAR = f"DELETE FROM {TABLE} WHERE namespace_md5 = md5(%s)::uuid"
# Namespaces in [lo, hi): the truncated bounds let the order index narrow the range (cutting
# both sides of a comparison to 200 characters keeps it true in byte order).
_RANGE = (
    "left(namespace, 200) >= left(%(lo)s, 200) AND left(namespace, 200) <= left(%(hi)s, 200) "
    "AND namespace >= %(lo)s AND namespace < %(hi)s"
)
_CLEAR_RANGE = f"DELETE FROM {TABLE} WHERE {_RANGE}"
_CLEAR_ALL = f"DELETE FROM {TABLE}"
# Keyset pages: a scan of millions of rows never holds a cursor or a transaction open. Ordering
# by the indexed prefix first is the same order as (namespace, key), and lets the server read
# the index in order and sort only rows sharing a 200-character prefix.
_ORDER = "ORDER BY left(namespace, 200), namespace, key LIMIT %(limit)s"
_AFTER = "left(namespace, 200) >= left(%(ns)s, 200) AND (namespace, key) > (%(ns)s, %(key)s)"
_SCAN_COLUMNS = f"SELECT namespace, key, value, expires_at, updated_at, updated_by FROM {TABLE} "
_SCAN_PAGE = f"{_SCAN_COLUMNS} WHERE {_AFTER} {_ORDER}"
_SCAN_RANGE_PAGE = f"{_SCAN_COLUMNS} WHERE {_AFTER} AND {_RANGE} {_ORDER}"
_SCAN_PAGE_SIZE = 1000
_COUNT_EXPIRED = f"SELECT count(*) FROM {TABLE} WHERE expires_at <= %s"
_DELETE_EXPIRED = f"DELETE FROM {TABLE} WHERE expires_at <= %s"
# One batch: pick victims through the expires_at index, delete them by physical address (a TID
# scan, no second index lookup). The outer `expires_at <= %s` is re-checked on a row a writer
# re-set meanwhile, so a key refreshed during cleanup survives.
_DELETE_EXPIRED_BATCH = (
    f"DELETE FROM {TABLE} WHERE ctid = ANY(ARRAY("
    f"SELECT ctid FROM {TABLE} WHERE expires_at <= %s LIMIT %s)) AND expires_at <= %s"
)

# Answers while connecting that mean "ask again shortly", as opposed to a wrong password, no such
# database, an unknown host or an invalid port, which waiting never fixes.
_TRANSIENT_CONNECT = (
    "connection refused",
    "starting up",
    "not yet accepting connections",  # crash recovery, PostgreSQL >= 14
    "not accepting connections",  # a standby being promoted
    "shutting down",
    "recovery mode",
    "too many clients",
    "connection slots are reserved",
    "timeout expired",
    "server closed the connection",
    "connection reset",
    "could not receive data",
    "could not send data",
    "no route to host",
    "network is unreachable",
    "temporary failure in name resolution",
    "cannot assign requested address",
)
# SQLSTATEs of a connected session that mean the same: connection exceptions (class 08),
# serialization failure / deadlock (40), insufficient resources (53), and the server going
# away or not ready (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now,
# 57P05 idle session timeout). 57014 (statement_timeout) is not: asking again won't help.
_TRANSIENT_CLASSES = ("08", "40", "53")
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03", "55P03"})
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Pools inherited through fork(): kept referenced so that garbage collection in the child never
# closes them (closing would end the parent's sessions on the shared sockets).
_INHERITED: list[ConnectionPool[Any]] = []


def conninfo_from_url(url: str) -> str:
    """libpq URL from ours or SQLAlchemy's: `postgresql+psycopg2://` → `postgresql://`."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ConfigError(
            f"not a PostgreSQL URL: {redact_url(url)!r}; write postgresql://user@host/db"
        )
    # libpq ends the user info at the first "/" or "@": an unencoded one in the password
    # would make the rest of it the host or database name, shown in every message.
    userinfo = rest.partition("?")[0].rpartition("@")[0]
    password = userinfo.partition(":")[2]
    if "/" in password or "@" in password or _BAD_ESCAPE.search(password):
        raise ConfigError(
            f"the password in the PostgreSQL URL {redact_url(url)!r} must be percent-encoded: "
            "write / as %2F, @ as %40 and % as %25 (urllib.parse.quote(password, safe=''))"
        )
    return "postgresql://" + rest


def server_name(conninfo: str) -> str:
    """host:port/dbname, as libpq resolves defaults; never the password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        reason = scrub(str(exc), url_secrets(conninfo))  # libpq may quote the password
        raise ConfigError(f"invalid PostgreSQL URL {redact_url(conninfo)!r}: {reason}") from None
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or ""
    return f"{host}:{port}/{dbname}"


def _transient_connect(exc: psycopg.OperationalError) -> bool:
    """A failure to connect that waiting may fix."""
    text = str(exc).lower()
    return any(part in text for part in _TRANSIENT_CONNECT)


def _is_transient(exc: BaseException) -> bool:
    """A failure of a connected session (or of the pool to hand one out) that waiting may fix.
    Failures to connect reach here only when `_transient_connect` already said so."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:  # no answer from the server: the connection broke under us
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES


class _Connection(psycopg.Connection[Any]):
    """A pooled connection that keeps one cursor for the hot path: a fresh cursor per call
    costs as much CPU as the rest of our layer. A connection serves one thread at a time."""

    _hot: psycopg.Cursor[Any] | None = None

    def hot(self) -> psycopg.Cursor[Any]:
        cursor = self._hot
        if cursor is None or cursor.closed:
            cursor = self._hot = self.cursor()
        return cursor


class _CommitOutcomeUnknown(Exception):
    """The connection broke while COMMIT was in flight."""


class PostgresBackend(StateBackend):
    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        retry_window_s: float = 30.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._conninfo = conninfo_from_url(url)
        self.url = redact_url(url)
        self.server = server_name(self._conninfo)
        self._pool_size = pool_size
        self._retry_window_s = retry_window_s
        self._connect_timeout_s = connect_timeout_s
        self._pool_obj: ConnectionPool[_Connection] | None = None
        self._release: weakref.finalize[Any, Any] | None = None
        self._pid = 0
        self._lock, self._lock_pid = threading.Lock(), os.getpid()

    def describe(self) -> str:
        return f"postgresql://{self.server}"

    # -- connections ------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        given = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in given:
            kwargs["connect_timeout"] = max(1, round(self._connect_timeout_s))
        if "application_name" not in given:
            kwargs["application_name"] = "taskstate"
        return kwargs

    def _pool(self) -> ConnectionPool[_Connection]:
        pool = self._pool_obj
        if pool is not None and self._pid == os.getpid():
            return pool
        if self._lock_pid != os.getpid():  # forked: another thread may have held the lock
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._lock:
            if self._pool_obj is not None and self._pid != os.getpid():
                _INHERITED.append(self._pool_obj)
                self._pool_obj = None
            if self._pool_obj is None:
                # The first connection is made here, not by the pool's background worker, so a
                # wrong password or a missing schema is reported at once with the server's words.
                self._probe(check_schema=True)
                pool = ConnectionPool(
                    self._conninfo,
                    connection_class=_Connection,
                    kwargs=self._connect_kwargs(),
                    min_size=1,
                    max_size=self._pool_size,
                    timeout=self._connect_timeout_s,
                    num_workers=1,
                    open=False,
                    name=f"taskstate {self.server}",
                )
                pool.open(wait=False)
                self._pool_obj, self._pid = pool, os.getpid()
                # A backend dropped without close() closes its pool from the dropping thread
                # (or at exit): left to the pool's own finaliser, that can run in the pool's
                # worker thread, which then tries to join itself.
                self._release = weakref.finalize(self, _release_pool, pool, self._pid)
            return self._pool_obj

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection outside the pool; a refusal that waiting won't fix is a BackendError."""
        try:
            return psycopg.connect(self._conninfo, **self._connect_kwargs())
        except psycopg.OperationalError as exc:
            if not _transient_connect(exc):
                reason = scrub(str(exc).strip(), url_secrets(self._conninfo))
                raise BackendError(
                    f"cannot connect to PostgreSQL at {self.server}: {reason}"
                ) from None
            raise

    def _probe(self, *, check_schema: bool) -> None:
        with self._connect() as conn:
            if check_schema:
                self._require_schema(conn)

    def _require_schema(self, conn: psycopg.Connection[Any]) -> None:
        current = _current_version(conn)
        if current is None or current < len(MIGRATIONS):
            have = "no taskstate tables" if current is None else f"schema version {current}"
            raise SchemaMissingError(
                f"PostgreSQL at {self.server} has {have}; this taskstate needs version "
                f"{len(MIGRATIONS)}. Run `taskstate db migrate` (once, with the same settings)"
            )

    def close(self) -> None:
        release, self._release, self._pool_obj = self._release, None, None
        if release is not None:
            release()

    def _run(self, op: Callable[[_Connection], T]) -> T:
        """Run `op` on a pooled connection; retry transient failures for a bounded window."""
        backoff = Backoff(self._retry_window_s)
        while True:
            pool = None
            # getconn/putconn, not pool.connection(): that also runs a (no-op) commit per call.
            # putconn rolls back a connection left in a transaction and discards a broken one.
            try:
                pool = self._pool()
                conn = pool.getconn()
                try:
                    return op(conn)
                finally:
                    pool.putconn(conn)
            except psycopg.errors.UndefinedTable:
                self._probe(check_schema=True)  # raises SchemaMissingError if that is why
                raise
            except _CommitOutcomeUnknown as exc:
                raise BackendUnavailableError(
                    f"lost the connection to PostgreSQL at {self.server} while committing an "
                    "atomic update; it may or may not have been applied, and it is not retried "
                    "so it can never apply twice. Read the key to see which"
                ) from exc.__cause__
            except (psycopg.Error, PoolTimeout) as exc:
                if not _is_transient(exc):
                    raise BackendError(f"PostgreSQL at {self.server}: {exc}") from exc
                last: BaseException = exc
            if not backoff.pause():
                raise BackendUnavailableError(
                    f"PostgreSQL at {self.server} is unavailable: {backoff.attempts} attempts "
                    f"over {self._retry_window_s:.0f}s failed; last error: {self._reason(last)}. "
                    "A write either landed whole before the outage or not at all"
                ) from last
            if pool is not None and pool is self._pool_obj:
                pool.check()  # drop every idle connection the outage broke, not one per attempt

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, PoolTimeout):
            try:
                self._probe(check_schema=False)
            except psycopg.Error as probe_error:
                return str(probe_error).strip()
            return "no pooled connection became free in time"
        return str(exc).strip()

    # -- the contract -------------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Entry | None:
        def op(conn: _Connection) -> Entry | None:
            cursor = conn.hot()
            cursor.execute(_GET, (namespace, key), prepare=True)
            row = cursor.fetchone()
            return None if row is None else Entry(*row)

        return self._run(op)

    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        params = (namespace, key, value, expires_at, now, updated_by)
        self._run(lambda conn: conn.hot().execute(_SET, params, prepare=True))

    def delete(self, namespace: str, key: str) -> None:
        self._run(lambda conn: conn.hot().execute(_DELETE, (namespace, key), prepare=True))

    def delete_if(self, namespace: str, key: str, version: Entry) -> bool:
        params = (namespace, key, version.value, version.expires_at, version.updated_by,
                  version.updated_at)  # fmt: skip
        return bool(self._run(lambda conn: conn.execute(_DELETE_IF, params).rowcount))

    def clear(self, namespace: str) -> int:
        return self._run(lambda conn: conn.execute(_CLEAR, (namespace,), prepare=True).rowcount)

    def clear_prefix(self, prefix: str) -> int:
        if not prefix:
            return self._run(lambda conn: conn.execute(_CLEAR_ALL).rowcount)
        bounds = {"lo": prefix, "hi": prefix_upper_bound(prefix)}
        return self._run(lambda conn: conn.execute(_CLEAR_RANGE, bounds).rowcount)

    def transact(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Entry | None], tuple[Entry | None, T]],
        now: float,
    ) -> T:
        def op(conn: psycopg.Connection[Any]) -> T:
            while True:
                committing = False
                try:
                    with conn.transaction():
                        row = conn.execute(_LOCK, (namespace, key), prepare=True).fetchone()
                        new, result = fn(None if row is None else Entry(*row))
                        if new is None:
                            return result
                        if row is not None:
                            params = (new.value, new.expires_at, now, new.updated_by)
                            conn.execute(_UPDATE, (*params, namespace, key), prepare=True)
                        elif not conn.execute(
                            _CREATE,
                            (namespace, key, new.value, new.expires_at, now, new.updated_by),
                            prepare=True,
                        ).rowcount:
                            continue  # created concurrently: start over and lock that row
                        committing = True
                    return result
                except psycopg.OperationalError as exc:
                    if committing:
                        raise _CommitOutcomeUnknown() from exc
                    raise

        return self._run(op)

    def set_many(self, rows: list[Row], *, replace: bool = True) -> int:
        params = [
            (r.namespace, r.key, r.value, r.expires_at, r.updated_at, r.updated_by) for r in rows
        ]

        def op(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(_SET if replace else _CREATE, params)
                return cursor.rowcount

        return self._run(op)

    def scan(self, prefix: str = "") -> Iterator[Row]:
        after = (prefix, "")
        while True:
            rows = self._run(functools.partial(self._scan_page, prefix=prefix, after=after))
            for row in rows:
                yield Row(*row)
            if len(rows) < _SCAN_PAGE_SIZE:
                return
            after = (rows[-1][0], rows[-1][1])

    @staticmethod
    def _scan_page(conn: psycopg.Connection[Any], prefix: str, after: tuple[str, str]) -> list[Any]:
        params = {"ns": after[0], "key": after[1], "limit": _SCAN_PAGE_SIZE}
        if not prefix:
            return conn.execute(_SCAN_PAGE, params, prepare=True).fetchall()
        params.update(lo=prefix, hi=prefix_upper_bound(prefix))
        return conn.execute(_SCAN_RANGE_PAGE, params, prepare=True).fetchall()

    def count_expired(self, now: float) -> int:
        def op(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(_COUNT_EXPIRED, (now,)).fetchone()
            return int(row[0]) if row else 0

        return self._run(op)

    def delete_expired(self, now: float, limit: int) -> int:
        if limit <= 0:
            return self._run(lambda conn: conn.execute(_DELETE_EXPIRED, (now,)).rowcount)
        params = (now, limit, now)
        return self._run(
            lambda conn: conn.execute(_DELETE_EXPIRED_BATCH, params, prepare=True).rowcount
        )

    # -- schema ---------------------------------------------------------------------------------

    def schema_status(self) -> SchemaStatus:
        return SchemaStatus(self._direct(_current_version), len(MIGRATIONS))

    def migrate(self) -> list[int]:
        def op(conn: psycopg.Connection[Any]) -> list[int]:
            applied: list[int] = []
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(_CREATE_VERSION_TABLE)
                current = _current_version(conn) or 0
                if current > len(MIGRATIONS):
                    raise BackendError(
                        f"PostgreSQL at {self.server} has taskstate schema version {current}, "
                        f"newer than this taskstate knows ({len(MIGRATIONS)}); upgrade taskstate"
                    )
                for version in range(current + 1, len(MIGRATIONS) + 1):
                    conn.execute(MIGRATIONS[version - 1])
                    conn.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (%s)", (version,))
                    applied.append(version)
            return applied

        # The schema may not exist yet, so this cannot go through the pool (whose first
        # connection checks it); migrations are one transaction, so a retry is always safe.
        return self._direct(op)

    def _direct(self, op: Callable[[psycopg.Connection[Any]], T]) -> T:
        """One short-lived connection outside the pool, with the same retries."""
        backoff = Backoff(self._retry_window_s)
        while True:
            try:
                with self._connect() as conn:
                    return op(conn)
            except psycopg.Error as exc:
                if not _is_transient(exc):
                    raise BackendError(f"PostgreSQL at {self.server}: {exc}") from exc
                if not backoff.pause():
                    raise BackendUnavailableError(
                        f"PostgreSQL at {self.server} is unavailable after "
                        f"{self._retry_window_s:.0f}s: {str(exc).strip()}"
                    ) from exc


def _release_pool(pool: ConnectionPool[Any], pid: int) -> None:
    if pid == os.getpid():
        pool.close()
    else:
        _INHERITED.append(pool)  # the parent's: closing it here would end its sessions


def _current_version(conn: psycopg.Connection[Any]) -> int | None:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,)).fetchone()
    if not (row and row[0]):
        return None
    version = conn.execute(_CURRENT_VERSION).fetchone()
    return None if version is None or version[0] is None else int(version[0])
