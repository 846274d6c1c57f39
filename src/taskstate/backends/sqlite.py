"""The embedded default: one SQLite file in WAL mode, shared by every process on the machine.

Each thread of each process gets its own connection (see "Fork safety" below). Every plain write
is one autocommit statement; read-modify-write runs under `BEGIN IMMEDIATE`, which takes the
file's write lock up front so concurrent updaters queue (busy_timeout) instead of failing.
WAL with synchronous=NORMAL loses nothing when the writing process is killed: a committed
transaction is in the WAL before `set` returns. (An OS crash or power cut can lose the last
commits; `synchronous=FULL` via `?synchronous=full` in the URL trades speed for that.)

A new connection checks the schema version without any lock and takes the write lock only
when there is a migration to apply, so a reader never queues behind a writer. A busy timeout
(another process held the write lock too long) is a `BackendBusyError` naming the file.

Files taskstate creates are private: directories 0700, the database 0600 (SQLite gives the WAL
and SHM files the database's mode). Under a setgid directory they are 0770/0660 instead, for
deployments whose components run as different users of one group.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from taskstate.backends.backoff import Backoff
from taskstate.backends.base import (
    DAG_COUNTS_EXPIRED_BOUND,
    Entry,
    HistoryBackend,
    KeyVersion,
    Row,
    SchemaStatus,
    Stamp,
    VersionRow,
    imported_versions,
    like_matcher,
    prefix_bounds,
    prefix_upper_bound,
    recorded_outcome,
)
from taskstate.errors import BackendBusyError, BackendError, ConfigError, DatabaseMissingError
from taskstate.redaction import redact_url
from taskstate.scope import META_KIND, META_PREFIX, SEP, task_prefix
from taskstate.stored import etag_of

T = TypeVar("T")

TABLE = "taskstate_entries"
VERSIONS = "taskstate_versions"
MARKS = "taskstate_version_marks"
WRITES = "taskstate_write_ids"
OUTCOMES = "taskstate_write_outcomes"
DAG_KEYS = "taskstate_dag_keys"
DAG_KEYS_FILL = "taskstate_dag_keys_fill"

_HEX32 = "[0-9a-f]" * 32

# The DAG id of a task namespace (t SEP dag SEP run SEP task SEP map index), and whether one is.
_DAG_OF = "substr({ns}, 3, instr(substr({ns}, 3), char(31)) - 1)"
_IS_TASK = "substr({ns}, 1, 2) = 't' || char(31)"
_TASKS_LO, _TASKS_HI = "t\x1f", "t "  # every task namespace is in [lo, hi)

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
    # 3: history (docs/history.md). Every kept version of a key, and each key's high-water
    # mark: the last version number handed out, kept after the key and its versions go, so a
    # number is never reused. value NULL: a deletion.
    f"""
    CREATE TABLE IF NOT EXISTS {VERSIONS} (
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        version    INTEGER NOT NULL,
        value      TEXT,
        expires_at REAL,
        updated_at REAL NOT NULL,
        updated_by TEXT,
        op         TEXT NOT NULL,
        PRIMARY KEY (namespace, key, version)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS {VERSIONS}_age ON {VERSIONS} (updated_at);
    CREATE INDEX IF NOT EXISTS {VERSIONS}_at ON {VERSIONS} (namespace, key, updated_at, version);
    CREATE TABLE IF NOT EXISTS {MARKS} (
        namespace TEXT NOT NULL,
        key       TEXT NOT NULL,
        version   INTEGER NOT NULL,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID
    """,
    # 4: history's write cost (docs/history.md, "Cost"): a version is one row in one b-tree.
    # Its number is the key's newest kept version + 1 (or its mark + 1 once pruning took every
    # version: pruning keeps the number in the mark first), so a write no longer updates the
    # mark; `clean` walks the keys instead of an index on the versions' age; and a version is
    # never stamped before the one it follows, so `as_of` is a binary search of the primary key
    # instead of an index on (key, time). Both indexes go; numbers stay; a version a writer
    # with a clock behind its predecessor's stamped earlier takes its predecessor's time.
    f"""
    DROP INDEX IF EXISTS {VERSIONS}_age;
    DROP INDEX IF EXISTS {VERSIONS}_at;
    UPDATE {VERSIONS} SET updated_at = w.at FROM (SELECT namespace, key, version, max(updated_at)
        OVER (PARTITION BY namespace, key ORDER BY version) AS at FROM {VERSIONS}) AS w
        WHERE w.namespace = {VERSIONS}.namespace AND w.key = {VERSIONS}.key
        AND w.version = {VERSIONS}.version AND w.at > {VERSIONS}.updated_at
    """,
    # 5: the write ledger (docs/api.md, "Write ids"): each write id a conditional write over the
    # API carried, the key it wrote and the ETag it produced (NULL: a delete), so a re-sent
    # request is answered with the first one's outcome. Pruned by `clean` (`written_at`).
    f"""
    CREATE TABLE IF NOT EXISTS {WRITES} (
        write_id   TEXT NOT NULL PRIMARY KEY,
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        etag       TEXT,
        written_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS {WRITES}_age ON {WRITES} (written_at)
    """,
    # The ledger keeps what an update operation wrote (the row's text), so its re-sent copy
    # answers the first one's new value however far the key has moved on since (docs/api.md,
    # "Update operations"). A table of its own, not a column: an older taskstate writing the
    # same file inserts ledger rows without naming their columns. Pruned with the ledger.
    f"""
    CREATE TABLE IF NOT EXISTS {OUTCOMES} (
        write_id   TEXT NOT NULL PRIMARY KEY,
        outcome    TEXT NOT NULL,
        written_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS {OUTCOMES}_age ON {OUTCOMES} (written_at)
    """,
    # The count catalog (docs/backends.md, "Key counts of /dags"): how many rows each DAG's task
    # namespaces hold, so `/dags` reads one row per DAG instead of counting its keys. Kept by
    # triggers in the write's own transaction, on a key's creation and deletion only: an
    # overwrite (the upsert's update) fires neither, and every write path (set, CAS, delete,
    # clear, import, restore, clean) goes through them. Expired rows not yet cleaned are
    # subtracted when read (`_EXPIRED_BY_DAG`). The rows already there are counted after this
    # step, a few DAGs per short write transaction (`_fill_dag_keys`, progress in
    # DAG_KEYS_FILL), so writers never wait for the whole table.
    f"""
    CREATE TABLE IF NOT EXISTS {DAG_KEYS} (
        dag TEXT NOT NULL PRIMARY KEY,
        n   INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS {DAG_KEYS_FILL} (after TEXT);
    INSERT INTO {DAG_KEYS_FILL} SELECT NULL WHERE NOT EXISTS (SELECT 1 FROM {DAG_KEYS_FILL});
    CREATE TRIGGER IF NOT EXISTS {DAG_KEYS}_created AFTER INSERT ON {TABLE}
    WHEN {_IS_TASK.format(ns="NEW.namespace")} BEGIN
        INSERT INTO {DAG_KEYS} VALUES ({_DAG_OF.format(ns="NEW.namespace")}, 1)
            ON CONFLICT (dag) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER IF NOT EXISTS {DAG_KEYS}_deleted AFTER DELETE ON {TABLE}
    WHEN {_IS_TASK.format(ns="OLD.namespace")} BEGIN
        INSERT INTO {DAG_KEYS} VALUES ({_DAG_OF.format(ns="OLD.namespace")}, -1)
            ON CONFLICT (dag) DO UPDATE SET n = n - 1;
    END
    """,
]
# The step that creates the count catalog: its rows are counted after it, before it is recorded.
_FILLS_DAG_KEYS = next(
    v for v, sql in enumerate(MIGRATIONS, 1) if f"TABLE IF NOT EXISTS {DAG_KEYS} " in sql
)

_GET = (
    f"SELECT value, expires_at, updated_by, updated_at FROM {TABLE} WHERE namespace = ? AND key = ?"
)
_SET = (
    f"INSERT INTO {TABLE} (namespace, key, value, expires_at, updated_at, updated_by) "
    "VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
    "expires_at = excluded.expires_at, updated_at = excluded.updated_at, "
    "updated_by = excluded.updated_by"
)
_CREATE = _SET.partition(" ON CONFLICT")[0] + " ON CONFLICT (namespace, key) DO NOTHING"
_DELETE = f"DELETE FROM {TABLE} WHERE namespace = ? AND key = ?"
_DELETE_IF = _DELETE + " AND value = ? AND expires_at IS ? AND updated_by IS ? AND updated_at = ?"
_CLEAR = f"DELETE FROM {TABLE} WHERE namespace = ?"
_CLEAR_RANGE = f"DELETE FROM {TABLE} WHERE namespace >= ? AND namespace < ?"
_COLUMNS = "namespace, key, value, expires_at, updated_at, updated_by"
_SCAN_ALL = f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY 1, 2"
_SCAN_RANGE = f"SELECT {_COLUMNS} FROM {TABLE} WHERE namespace >= ? AND namespace < ? ORDER BY 1, 2"
# Listings and discovery: ranges of the primary key (namespace, key), which orders the table.
# A live row: taskstate.stored.is_live in SQL.
_LIVE = "(expires_at IS NULL OR expires_at > :now)"
_IN_NAMESPACE = "namespace = :ns AND key >= :lo"
_ROWS = (
    f"SELECT {_COLUMNS} FROM {TABLE} WHERE {_IN_NAMESPACE} AND {_LIVE} "
    "ORDER BY key LIMIT :limit OFFSET :offset"
)
_ROWS_UNDER = _ROWS.replace(":lo", ":lo AND key < :hi")
_COUNT_IN = (
    f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE {_IN_NAMESPACE} AND {_LIVE} LIMIT :cap)"
)
_COUNT_IN_UNDER = _COUNT_IN.replace(":lo", ":lo AND key < :hi")
_COUNT_RANGE = (
    f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} "
    f"WHERE namespace >= :lo AND namespace < :hi AND {_LIVE} LIMIT :cap)"
)
# A skip scan: one seek per distinct field, each to the first live row past the previous
# field (its namespace with the field's end bumped from the separator, \x1f, to " ").
_FIRST_FROM = (
    f"SELECT namespace FROM {TABLE} WHERE namespace >= {{at}} AND namespace < :hi AND {_LIVE} "
    "ORDER BY namespace LIMIT 1"
)
_REST = "substr(ns, :n + 1)"
_FIELD_END = f"instr({_REST}, char(31))"
_NEXT = {
    True: "ns || char(1)",
    False: f"CASE {_FIELD_END} WHEN 0 THEN ns || char(1) "
    f"ELSE substr(ns, 1, :n + {_FIELD_END} - 1) || ' ' END",
}
_FIELD = {
    True: _REST,
    False: f"CASE {_FIELD_END} WHEN 0 THEN {_REST} ELSE substr(ns, :n + 1, {_FIELD_END} - 1) END",
}
_GROUPS = {
    whole: (
        f"WITH RECURSIVE skip(ns) AS (SELECT ({_FIRST_FROM.format(at=':lo')}) "
        f"UNION ALL SELECT ({_FIRST_FROM.format(at=_NEXT[whole])}) FROM skip WHERE ns IS NOT NULL) "
        f"SELECT {_FIELD[whole]} FROM skip WHERE ns IS NOT NULL"
    )
    for whole in (True, False)
}
_TOP = "\U0010ffff"  # above every namespace (each starts with a kind letter)
# History: a version is numbered one past the key's newest kept version, or past its mark when
# it has none (pruning moves a key's number into its mark before it deletes the key's newest
# version, so a number is never reused), and stamped no earlier than that newest version (so
# times never decrease along the numbers: `_VERSIONS_AT`), in the write's transaction. Reads
# (primary-key seeks), then one row into one b-tree: no mark and no index is written. The
# versions past the number kept are trimmed by the write (every `_TRIM_EVERY`-th of a `set`,
# in one DELETE) and never read (`_WINDOW`).
_TOP_VERSION = f"SELECT max(version) FROM {VERSIONS} WHERE namespace = {{ns}} AND key = {{key}}"
_MARK_OF = f"SELECT version FROM {MARKS} WHERE namespace = {{ns}} AND key = {{key}}"
_NEWEST = (
    f"(SELECT {{column}} FROM {VERSIONS} WHERE namespace = {{ns}} AND key = {{key}} "
    "ORDER BY version DESC LIMIT 1)"
)
_APPEND_NEW = (
    f"INSERT INTO {VERSIONS} VALUES ({{ns}}, {{key}}, 1 + max(coalesce("
    f"{_NEWEST.format(column='version', ns='{ns}', key='{key}')}, 0), "
    f"coalesce(({_MARK_OF}), 0)), {{value}}, {{expires_at}}, max({{at}}, coalesce("
    f"{_NEWEST.format(column='updated_at', ns='{ns}', key='{key}')}, {{at}})), {{by}}, {{op}})"
)
_APPEND = _APPEND_NEW.format(
    ns="?1", key="?2", value="?3", expires_at="?4", at="?5", by="?6", op="?7"
)
_TRIM_KEPT = (
    f"DELETE FROM {VERSIONS} WHERE namespace = ?1 AND key = ?2 AND version <= "
    f"({_TOP_VERSION.format(ns='?1', key='?2')}) - ?3"
)
# An export's version, numbered by the importer, stamped no earlier than the one before it.
_APPEND_IMPORTED = (
    f"INSERT INTO {VERSIONS} SELECT ?1, ?2, ?3, ?4, ?5, max(?6, coalesce((SELECT updated_at "
    f"FROM {VERSIONS} WHERE namespace = ?1 AND key = ?2 AND version < ?3 "
    "ORDER BY version DESC LIMIT 1), ?6)), ?7, ?8"
)
_TRIM = f"DELETE FROM {VERSIONS} WHERE namespace = ? AND key = ? AND version <= ?"
# The key's number so far (None: it never had a version): its newest kept version or its mark.
_KEPT, _MARKED = _TOP_VERSION.format(ns="?1", key="?2"), _MARK_OF.format(ns="?1", key="?2")
_MARK = f"SELECT max(coalesce(({_KEPT}), ({_MARKED})), coalesce(({_MARKED}), ({_KEPT})))"
# A stamped `set` is one statement: TEMP triggers (this connection's alone, so another process,
# an older taskstate or a store with history off never runs them) append the version and, on
# every `_TRIM_EVERY`-th number, trim the key's versions past the number kept, inside the
# write's own statement. They fire only while `taskstate_versioning()` says so: `set` turns it
# on around its statement (a deletion too, below; every other write appends and trims itself).
# The operation they record is the constant `set` (other operations take the explicit path): a
# second call into Python per write cost 0.07x of an unversioned `set`. Measured in
# bench/README.md ("History").
_TRIM_EVERY = 16
_TRIGGER_OP = "set"
_VERSIONING_BODY = _APPEND_NEW.format(
    ns="new.namespace",
    key="new.key",
    value="new.value",
    expires_at="new.expires_at",
    at="new.updated_at",
    by="new.updated_by",
    op=f"'{_TRIGGER_OP}'",
)
# A stamped deletion (delete, clear, expiry by `clean`) is one statement too: the deletion
# trigger appends each removed row's version, stamped with what `taskstate_deletion()` and its
# companions return while the statement runs (taskstate's own rows are never versioned). One
# statement per row from Python had cost `clean` 3.6x its time without history, the trigger
# 2.0x (bench/cleanup_history.py).
_DELETION_BODY = _APPEND_NEW.format(
    ns="old.namespace",
    key="old.key",
    value="NULL",
    expires_at="NULL",
    at="taskstate_deleted_at()",
    by="taskstate_deleted_by()",
    op="taskstate_deletion()",
)
_VERSIONING = [
    *(
        f"CREATE TEMP TRIGGER IF NOT EXISTS taskstate_versioning_{event} AFTER {event.upper()} "
        f"ON {TABLE} WHEN taskstate_versioning() BEGIN {_VERSIONING_BODY}; END"
        for event in ("insert", "update")
    ),
    f"CREATE TEMP TRIGGER IF NOT EXISTS taskstate_versioning_delete AFTER DELETE ON {TABLE} "
    f"WHEN taskstate_deletion() IS NOT NULL AND substr(old.namespace, 1, {len(META_PREFIX)}) "
    f"<> '{META_KIND}' || char({ord(SEP)}) BEGIN {_DELETION_BODY}; END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS taskstate_versioning_trim AFTER INSERT ON {VERSIONS} "
    f"WHEN new.version % {_TRIM_EVERY} = 0 AND taskstate_versioning() BEGIN "
    f"DELETE FROM {VERSIONS} WHERE namespace = new.namespace AND key = new.key "
    "AND version <= new.version - taskstate_keep(); END",
]
_RAISE_MARK = (
    f"INSERT INTO {MARKS} (namespace, key, version) VALUES (?, ?, ?) "
    "ON CONFLICT (namespace, key) DO UPDATE SET version = max(version, excluded.version)"
)
_EXISTS = f"SELECT 1 FROM {TABLE} WHERE namespace = ? AND key = ?"
_VERSION_COLUMNS = "version, value, expires_at, updated_at, updated_by, op"
# The versions a read sees: the newest `:keep` numbers (a `set` trims the older ones in batches).
_WINDOW = (
    f"version > coalesce((SELECT max(version) FROM {VERSIONS} WHERE namespace = :ns "
    "AND key = :key), 0) - :keep"
)
_HISTORY = (
    f"SELECT {_VERSION_COLUMNS} FROM {VERSIONS} WHERE namespace = :ns AND key = :key "
    f"AND {_WINDOW} ORDER BY version DESC LIMIT :limit"
)
# As of an instant: the newest version stamped at or before it. Times never decrease along a
# key's numbers (`_APPEND_NEW`), so a binary search of the primary key finds it, one seek per
# halving (about 14 for 10,000 versions) in one statement: `b` narrows [lo, hi] (kept numbers,
# with gaps) down to that version, or to the oldest kept one when none is that old (then the
# last SELECT finds nothing).
_FIRST_FROM_MID = (
    f"FROM {VERSIONS} WHERE namespace = :ns AND key = :key AND version >= (lo + hi + 1) / 2 "
    "ORDER BY version LIMIT 1"
)
_EARLY = f"(SELECT updated_at {_FIRST_FROM_MID}) <= :at"
_KEY_VERSIONS = f"FROM {VERSIONS} WHERE namespace = :ns AND key = :key"
_VERSIONS_AT = (
    "WITH RECURSIVE b(lo, hi) AS (SELECT "
    f"max((SELECT min(version) {_KEY_VERSIONS}), "
    f"(SELECT max(version) {_KEY_VERSIONS}) - :keep + 1), (SELECT max(version) {_KEY_VERSIONS}) "
    f"UNION ALL SELECT CASE WHEN {_EARLY} THEN (SELECT version {_FIRST_FROM_MID}) ELSE lo END, "
    f"CASE WHEN {_EARLY} THEN hi ELSE (lo + hi + 1) / 2 - 1 END FROM b WHERE lo < hi) "
    f"SELECT {_VERSION_COLUMNS} {_KEY_VERSIONS} "
    "AND version = (SELECT min(hi) FROM b) AND updated_at <= :at"
)
# The versions before one (`versions(at=...)` with a limit past 1).
_VERSIONS_BELOW = (
    f"SELECT {_VERSION_COLUMNS} {_KEY_VERSIONS} AND version < :below AND {_WINDOW} "
    "ORDER BY version DESC LIMIT :limit"
)
_VERSION = (
    f"SELECT {_VERSION_COLUMNS} FROM {VERSIONS} WHERE namespace = :ns AND key = :key "
    f"AND version = :v AND {_WINDOW}"
)
_FIRST_VERSION = (
    f"SELECT max(min(version), max(version) - :keep + 1) FROM {VERSIONS} "
    "WHERE namespace = :ns AND key = :key"
)
# Every key ever written with history on: those with kept versions, and those whose versions
# were all pruned (their mark).
_VERSION_KEYS = (
    f"SELECT namespace, key FROM {VERSIONS} WHERE namespace >= :lo AND namespace < :hi "
    f"UNION SELECT namespace, key FROM {MARKS} WHERE namespace >= :lo AND namespace < :hi "
    "ORDER BY 1, 2"
)
_TASK_KEYS = _VERSION_KEYS.replace(
    " ORDER BY",
    f" UNION SELECT namespace, key FROM {TABLE} "
    "WHERE namespace >= :lo AND namespace < :hi ORDER BY",
)
# `clean` walks the keys that have versions a batch at a time (no index on the versions' age: a
# write would pay for it): the batch's last key, then one DELETE over the batch's key range of
# the versions past the number kept or older than `before` (but the newest of a live key).
# Where it may delete a key's newest version (an age limit, or history off) it first moves each
# key's number into its mark, in one statement over the same range.
_PRUNE_UNTIL = (
    f"SELECT DISTINCT namespace, key FROM {VERSIONS} WHERE (namespace, key) > (:ans, :akey) "
    "ORDER BY namespace, key LIMIT 1 OFFSET :skip"
)
_PRUNE_RANGE = "(namespace, key) > (:ans, :akey) AND (namespace, key) <= (:zns, :zkey)"
_KEEP_MARKS = (
    f"INSERT INTO {MARKS} (namespace, key, version) SELECT namespace, key, max(version) "
    f"FROM {VERSIONS} WHERE {_PRUNE_RANGE} GROUP BY namespace, key "
    "ON CONFLICT (namespace, key) DO UPDATE SET version = max(version, excluded.version)"
)
# The row's key's newest number (`_TOP_VERSION` of the row being deleted: aliased, since the
# subquery reads the same table).
_TOP_OF_ROW = (
    f"SELECT max(x.version) FROM {VERSIONS} AS x "
    f"WHERE x.namespace = {VERSIONS}.namespace AND x.key = {VERSIONS}.key"
)
_PRUNE_KEYS = (
    f"DELETE FROM {VERSIONS} WHERE {_PRUNE_RANGE} AND (version <= ({_TOP_OF_ROW}) - :keep "
    f"OR (updated_at < :before AND NOT (version = ({_TOP_OF_ROW}) AND EXISTS "
    f"(SELECT 1 FROM {TABLE} AS r WHERE r.namespace = {VERSIONS}.namespace "
    f"AND r.key = {VERSIONS}.key))))"
)
_VERSION_REFS = f"SELECT value FROM {VERSIONS} WHERE value >= '@' AND value < 'A'"
_COUNT_EXPIRED = f"SELECT count(*) FROM {TABLE} WHERE expires_at <= ?"
# `/dags`' key counts: the catalog's rows of the page's DAGs, less their rows expired and not yet
# cleaned, found through the expiry index (which holds each row's namespace: the table has no
# rowid), at most `_EXPIRED_BOUND` + 1 of them store-wide, counted by DAG (NULL: not a task's).
_DAG_KEYS_OF = f"SELECT dag, n FROM {DAG_KEYS} WHERE dag IN ({{}})"
_DAG_KEYS_IN_ORDER = f"SELECT dag, n FROM {DAG_KEYS} WHERE n > 0 ORDER BY dag"
_EXPIRED_BY_DAG = (
    f"SELECT CASE WHEN namespace >= :lo AND namespace < :hi THEN {_DAG_OF.format(ns='namespace')} "
    f"END, count(*) FROM (SELECT namespace FROM {TABLE} WHERE expires_at <= :now LIMIT :bound) "
    "GROUP BY 1"
)
_EXPIRED_BOUND = DAG_COUNTS_EXPIRED_BOUND
_IN_LIST = 500
_NEXT_TASK_NAMESPACE = (
    f"SELECT namespace FROM {TABLE} WHERE namespace >= ? AND namespace < ? "
    "ORDER BY namespace LIMIT 1"
)
_FILL_DAG = (
    f"INSERT INTO {DAG_KEYS} VALUES (:dag, (SELECT count(*) FROM {TABLE} "
    "WHERE namespace >= :lo AND namespace < :hi)) ON CONFLICT (dag) DO UPDATE SET n = excluded.n"
)
_FILL_SLICE_S = 0.05  # the longest a fill transaction goes on taking DAGs
# The pause after each: a writer waiting for the lock retries at least every 100 ms (SQLite's
# busy handler), so it always finds one gap; back to back, the fill held it off for 1.4 s.
_FILL_PAUSE_S = 0.1
_DELETE_EXPIRED = f"DELETE FROM {TABLE} WHERE expires_at <= ?"
# Bounded: one bound parameter however large the batch (stock SQLite caps variables at 999/32766).
_DELETE_EXPIRED_BATCH = (
    f"DELETE FROM {TABLE} WHERE (namespace, key) IN "
    f"(SELECT namespace, key FROM {TABLE} WHERE expires_at <= ? LIMIT ?)"
)
_RECORDED = (
    f"SELECT w.namespace, w.key, w.etag, o.outcome FROM {WRITES} AS w "
    f"LEFT JOIN {OUTCOMES} AS o ON o.write_id = w.write_id WHERE w.write_id = ?"
)
_RECORD = f"INSERT INTO {WRITES} VALUES (?, ?, ?, ?, ?)"
_KEEP_OUTCOME = f"INSERT INTO {OUTCOMES} VALUES (?, ?, ?)"
_FORGET_OUTCOMES = (
    f"DELETE FROM {OUTCOMES} WHERE write_id IN "
    f"(SELECT write_id FROM {OUTCOMES} WHERE written_at < ? LIMIT ?)"
)
_FORGET_WRITES = (
    f"DELETE FROM {WRITES} WHERE write_id IN "
    f"(SELECT write_id FROM {WRITES} WHERE written_at < ? LIMIT ?)"
)


def path_from_url(url: str) -> Path:
    """`sqlite:///relative/path.db` or `sqlite:////absolute/path.db` (SQLAlchemy's form)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or not parts.path.startswith("/") or parts.path == "/":
        raise ConfigError(
            f"not a SQLite URL: {redact_url(url)!r}; write sqlite:///relative.db or "
            "sqlite:////abs/path.db"
        )
    return Path(unquote(parts.path[1:]))


F = TypeVar("F", bound=Callable[..., Any])


def _typed_errors(method: F) -> F:
    """sqlite3's errors as taskstate's, naming the file (the busy timeout as its own type)."""

    @functools.wraps(method)
    def wrapper(self: SQLiteBackend, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    return wrapper  # type: ignore[return-value]


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _private_mode(directory: Path, *, is_dir: bool) -> int:
    """0700/0600, or 0770/0660 (keeping setgid) when `directory` is setgid."""
    if directory.stat().st_mode & stat.S_ISGID:
        return 0o2770 if is_dir else 0o660
    return 0o700 if is_dir else 0o600


def _create_private(path: Path) -> None:
    """Create the missing directories and the database file with private modes; whatever
    already exists (or another process creates meanwhile) keeps the mode it has."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        mode = _private_mode(directory.parent, is_dir=True)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, mode)  # exact, whatever the umask
    if path.exists():
        return
    mode = _private_mode(path.parent, is_dir=False)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


# Fork safety. SQLite keeps per-process lock bookkeeping for each file (its inode list, the WAL
# index's shared-memory node), and a forked child inherits it: a child that opens the file while
# its parent holds a connection to it shares that bookkeeping and never takes the lock that marks
# a process as a user of the WAL. When the parent later closes its last connection (or the GC
# closes one it dropped), it believes itself the file's last user, checkpoints and deletes the
# WAL under the children, and their later commits are lost (seen: 8 children lost 2-24% of their
# `update`s). So:
# - just before fork, the forking thread's idle connections are closed: a process that forks
#   from the thread that used the store (the usual case) hands its children nothing;
# - other threads' connections cannot be closed from here (a close racing a statement crashes
#   the interpreter), so their files are remembered, and the parent keeps one connection to
#   each open until it exits: it never becomes the file's last user while children may run;
# - a child never closes a connection it inherited: closing a descriptor drops every POSIX lock
#   the process holds on the file, its own connections' included.
_INHERITED: list[sqlite3.Connection] = []
_SHARED: set[Path] = set()  # files a child inherited an open connection to
_KEEPERS: dict[Path, sqlite3.Connection] = {}  # one connection kept open to each of them
_OPEN: weakref.WeakSet[_Slot] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()  # threads open connections while another may be forking
_forks = 0  # connections opened before the latest fork are not used after it


def _release(conn: sqlite3.Connection, pid: int, path: Path) -> None:
    if pid != os.getpid():
        _INHERITED.append(conn)
    elif path in _SHARED and path not in _KEEPERS:
        _KEEPERS[path] = conn
    else:
        conn.close()


class _Versioning:
    """What a connection's versioning triggers read (`_VERSIONING`): whether the write running
    now is versioned by them, how many versions to keep, and a deletion's stamp. It holds no
    reference to the connection or the backend, so the functions it backs make no cycle."""

    __slots__ = ("deletion", "keep", "on")

    def __init__(self) -> None:
        self.on = False
        self.keep = 0
        self.deletion: Stamp | None = None


class _Slot:
    """One thread's connection, closed when the slot goes rather than when the cyclic GC gets to
    it (CPython's connections sit in a reference cycle through their statement cache)."""

    __slots__ = ("__weakref__", "conn", "path", "release", "scans", "thread")

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path, self.thread = conn, path, threading.get_ident()
        self.scans = 0  # open `scan` iterators: their read transaction is in use
        self.release = weakref.finalize(self, _release, conn, os.getpid(), path)
        with _OPEN_LOCK:
            _OPEN.add(self)


def _before_fork() -> None:
    global _forks
    _forks += 1
    me = threading.get_ident()
    with _OPEN_LOCK:
        for slot in list(_OPEN):
            if slot.release.alive and (slot.thread != me or slot.scans or slot.conn.in_transaction):
                _SHARED.add(slot.path)
                continue
            slot.release()  # closes it, unless it is closed already
            _OPEN.discard(slot)


def _after_fork_in_child() -> None:
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


_INF = float("inf")


class SQLiteBackend(HistoryBackend):
    """A `HistoryBackend` on one SQLite file in WAL mode: a connection per thread per process."""

    store_write_lock = True  # one writer at a time for the whole file
    records_writes = True

    def __init__(self, url: str, *, busy_timeout_s: float = 60.0, create: bool = True) -> None:
        """`create=False`: a missing file is a `DatabaseMissingError` instead of a new, empty
        database (so a read with a mistyped path does not leave a file behind)."""
        self.url = url
        self._create = create
        self.path = path_from_url(url)
        options = {k: v[-1].lower() for k, v in parse_qs(urlsplit(url).query).items()}
        self._synchronous = options.get("synchronous", "normal")
        if self._synchronous not in ("normal", "full", "extra"):
            raise ConfigError(f"synchronous must be normal, full or extra in {redact_url(url)!r}")
        # `?mmap_size=BYTES`: read the file through a memory map of up to that many bytes
        # (docs/backends.md, "SQLite": point reads at 10 M rows; off by default).
        mmap_size = options.get("mmap_size", "0")
        if not mmap_size.isdigit():
            raise ConfigError(f"mmap_size must be a number of bytes in {redact_url(url)!r}")
        self._mmap_size = int(mmap_size)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._migrated = False

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.forks == _forks and local.pid == os.getpid():
            return conn
        conn = self._open()
        if not self._migrated:
            # The embedded default creates its own schema on first use; there is no server
            # to migrate ahead of time. Read the version without a lock: when it is current
            # (the usual case) this connection never waits for a writer.
            if (_user_version(conn) or 0) < len(MIGRATIONS):
                self._migrate_on(conn)
            self._migrated = True
        return conn

    def _error(self, exc: sqlite3.Error) -> BackendError:
        if _is_busy(exc):
            return BackendBusyError(
                f"the state database {self.path} stayed locked by another process's write for "
                f"more than {self._busy_timeout_s:g}s (the busy timeout); nothing was done. "
                "Retry, or find the process holding a long transaction on it"
            )
        return BackendError(f"the state database {self.path}: {exc}")

    def _open(self) -> sqlite3.Connection:
        if not self._create and not self.path.exists():
            raise DatabaseMissingError(
                f"there is no state database at {self.path}: nothing was written there yet, or "
                "the path is mistyped (check --url or [state_store] taskstate_url); reads do "
                "not create it, a write does"
            )
        try:
            _create_private(self.path)
        except OSError as exc:
            raise BackendError(
                f"cannot create the state database {self.path}: {exc.strerror or exc}"
            ) from None
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
            if self._mmap_size:
                conn.execute(f"PRAGMA mmap_size={self._mmap_size}")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise self._error(exc) from exc
            raise BackendError(f"cannot open the state database {self.path}: {exc}") from exc
        local = self._local
        local.slot, local.conn = _Slot(conn, self.path), conn
        local.pid, local.forks = os.getpid(), _forks
        local.versioning = None  # installed on this connection's first versioned `set`
        return conn

    def _versioning(self, conn: sqlite3.Connection) -> _Versioning:
        """This connection's versioning trigger and what it reads, installed once."""
        versioning: _Versioning | None = getattr(self._local, "versioning", None)
        if versioning is None:
            versioning = _Versioning()
            state = versioning  # the functions close over it alone
            conn.create_function("taskstate_versioning", 0, lambda: state.on)
            conn.create_function("taskstate_keep", 0, lambda: state.keep)
            conn.create_function("taskstate_deletion", 0, lambda: _field(state.deletion, 0))
            conn.create_function("taskstate_deleted_at", 0, lambda: _field(state.deletion, 1))
            conn.create_function("taskstate_deleted_by", 0, lambda: _field(state.deletion, 2))
            for statement in _VERSIONING:
                conn.execute(statement)
            self._local.versioning = versioning
        return versioning

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs an exclusive lock and SQLite does not run the busy
        # handler for it, so processes opening a fresh file at once must wait here themselves.
        backoff = Backoff(self._busy_timeout_s, first_s=0.001, cap_s=0.1)
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or not backoff.pause():
                    raise

    @contextlib.contextmanager
    def _write_transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE` ... COMMIT, rolled back on any exception (the one place)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back by itself after some errors
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """As `StateBackend.close`: releases this thread's connection (others keep theirs)."""
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            slot.release()
        self._local = threading.local()

    @_typed_errors
    def get(self, namespace: str, key: str) -> Entry | None:
        """As `StateBackend.get`: one primary-key SELECT."""
        row = self._conn().execute(_GET, (namespace, key)).fetchone()
        return None if row is None else Entry(*row)

    @_typed_errors
    def may_be_recorded(self, write_id: str) -> bool:
        """As `StateBackend.may_be_recorded`: one primary-key SELECT of the ledger."""
        return self._conn().execute(_RECORDED, (write_id,)).fetchone() is not None

    @_typed_errors
    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
        stamp: Stamp | None = None,
    ) -> None:
        """As `HistoryBackend.set`: one upsert; a TEMP trigger adds a version stamped at `now`."""
        params = (namespace, key, value, expires_at, now, updated_by)
        if stamp is None or not self.history_versions:
            self._conn().execute(_SET, params)
            return
        if stamp.at == now and stamp.op == _TRIGGER_OP:  # the row as written: the trigger's
            conn = self._conn()
            versioning = self._versioning(conn)
            versioning.on, versioning.keep = True, self.history_versions
            try:
                conn.execute(_SET, params)
            finally:
                versioning.on = False
            return
        with self._write_transaction(self._conn()) as conn:
            conn.execute(_SET, params)
            self._append(conn, namespace, key, value, expires_at, stamp._replace(by=updated_by))

    def _append(
        self,
        conn: sqlite3.Connection,
        namespace: str,
        key: str,
        value: str | None,
        expires_at: float | None,
        stamp: Stamp,
    ) -> None:
        """Record a version of `key` in the caller's transaction."""
        conn.execute(_APPEND, (namespace, key, value, expires_at, stamp.at, stamp.by, stamp.op))
        conn.execute(_TRIM_KEPT, (namespace, key, self.history_versions))

    def _deleting(
        self,
        sql: str,
        params: tuple[Any, ...],
        stamp: Stamp | None,
        within: sqlite3.Connection | None = None,
    ) -> int:
        """Run a DELETE (one statement: atomic on its own); with a stamp (and history on), the
        deletion trigger records a deletion version of each row gone, inside the statement.
        `within`: in that connection's open write transaction."""
        conn = within or self._conn()
        if stamp is None or not self.history_versions:
            return conn.execute(sql, params).rowcount
        versioning = self._versioning(conn)
        versioning.on, versioning.keep, versioning.deletion = True, self.history_versions, stamp
        try:
            return conn.execute(sql, params).rowcount
        finally:
            versioning.on, versioning.deletion = False, None

    @_typed_errors
    def delete(self, namespace: str, key: str, stamp: Stamp | None = None) -> None:
        """As `HistoryBackend.delete`: one DELETE (stamped: in a transaction with the version)."""
        self._deleting(_DELETE, (namespace, key), stamp)

    @_typed_errors
    def delete_if(
        self,
        namespace: str,
        key: str,
        version: Entry,
        stamp: Stamp | None = None,
        write_id: str | None = None,
    ) -> bool:
        """As `HistoryBackend.delete_if`: a DELETE matching every column of `version`."""
        params = (namespace, key, version.value, version.expires_at, version.updated_by)
        if write_id is None:
            return self._deleting(_DELETE_IF, (*params, version.updated_at), stamp) > 0
        with self._write_transaction(self._conn()) as conn:
            _raise_if_recorded(conn, write_id, namespace, key)
            gone = self._deleting(_DELETE_IF, (*params, version.updated_at), stamp, conn) > 0
            if gone:
                conn.execute(_RECORD, (write_id, namespace, key, None, time.time()))
        return gone

    @_typed_errors
    def clear(self, namespace: str, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.clear`: one DELETE on the namespace."""
        return self._deleting(_CLEAR, (namespace,), stamp)

    @_typed_errors
    def clear_prefix(self, prefix: str, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.clear_prefix`: one DELETE over the namespace range."""
        if not prefix:
            return self._deleting(f"DELETE FROM {TABLE}", (), stamp)
        return self._deleting(_CLEAR_RANGE, (prefix, prefix_upper_bound(prefix)), stamp)

    @_typed_errors
    def transact(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Entry | None], tuple[Entry | None, T]],
        now: float,
        stamp: Stamp | None = None,
        write_id: str | None = None,
        keep_value: bool = False,
    ) -> T:
        """As `HistoryBackend.transact`: read, `fn` and write under `BEGIN IMMEDIATE` (the
        file's write lock, so a request re-sent with the same `write_id` waits for the first)."""
        with self._write_transaction(self._conn()) as conn:
            if write_id is not None:
                _raise_if_recorded(conn, write_id, namespace, key)
            row = conn.execute(_GET, (namespace, key)).fetchone()
            new, result = fn(None if row is None else Entry(*row))
            if new is not None:
                params = (new.value, new.expires_at, now, new.updated_by)
                conn.execute(_SET, (namespace, key, *params))
                if write_id is not None:
                    etag = etag_of(new.value, new.expires_at, new.updated_by, now)
                    conn.execute(_RECORD, (write_id, namespace, key, etag, now))
                    if keep_value:
                        conn.execute(_KEEP_OUTCOME, (write_id, new.value, now))
                if stamp is not None and self.history_versions:
                    self._append(
                        conn,
                        namespace,
                        key,
                        new.value,
                        new.expires_at,
                        stamp._replace(at=now, by=new.updated_by),
                    )
        return result

    @_typed_errors
    def set_many(
        self,
        rows: list[Row],
        *,
        replace: bool = True,
        stamp: Stamp | None = None,
        versions: Sequence[KeyVersion] = (),
    ) -> int:
        """As `HistoryBackend.set_many`: every row (and its versions) in one write transaction."""
        with self._write_transaction(self._conn()) as conn:
            if stamp is None or not self.history_versions:
                written: int = conn.executemany(_SET if replace else _CREATE, rows).rowcount
                return written
            self._import_versions(conn, versions, replace)
            written = 0
            for row in rows:
                if conn.execute(_SET if replace else _CREATE, row).rowcount:
                    written += 1
                    self._append(
                        conn,
                        row.namespace,
                        row.key,
                        row.value,
                        row.expires_at,
                        stamp._replace(by=row.updated_by),
                    )
        return written

    def _import_versions(
        self, conn: sqlite3.Connection, versions: Sequence[KeyVersion], replace: bool
    ) -> None:
        """An export's versions, in the caller's transaction (`HistoryBackend.set_many`)."""

        def mark(namespace: str, key: str) -> int | None:
            found = conn.execute(_MARK, (namespace, key)).fetchone()[0]
            return None if found is None else int(found)

        def exists(namespace: str, key: str) -> bool:
            return conn.execute(_EXISTS, (namespace, key)).fetchone() is not None

        for namespace, key, rows, top in imported_versions(versions, replace, exists, mark):
            conn.executemany(_APPEND_IMPORTED, rows)
            conn.execute(_RAISE_MARK, (namespace, key, top))
            conn.execute(_TRIM, (namespace, key, top - self.history_versions))

    @_typed_errors
    def versions(
        self, namespace: str, key: str, *, limit: int, at: float | None = None
    ) -> list[VersionRow]:
        """As `HistoryBackend.versions`: newest first; `at` is one seek on the updated_at index."""
        params = {"ns": namespace, "key": key, "limit": limit, "at": at}
        params["keep"] = self.history_versions
        if at is None:
            return [VersionRow(*row) for row in self._conn().execute(_HISTORY, params)]
        found = [VersionRow(*row) for row in self._conn().execute(_VERSIONS_AT, params)]
        if found and limit > 1:
            params.update(below=found[0].version, limit=limit - 1)
            found += [VersionRow(*row) for row in self._conn().execute(_VERSIONS_BELOW, params)]
        return found[:limit]

    @_typed_errors
    def version(self, namespace: str, key: str, version: int) -> VersionRow | None:
        """As `HistoryBackend.version`: one primary-key SELECT on the versions table."""
        params = {"ns": namespace, "key": key, "v": version, "keep": self.history_versions}
        row = self._conn().execute(_VERSION, params).fetchone()
        return None if row is None else VersionRow(*row)

    @_typed_errors
    def first_version(self, namespace: str, key: str) -> int | None:
        """As `HistoryBackend.first_version`: the key's lowest version still kept."""
        params = {"ns": namespace, "key": key, "keep": self.history_versions}
        found = self._conn().execute(_FIRST_VERSION, params).fetchone()[0]
        return None if found is None else int(found)

    @_typed_errors
    def task_versions(self, prefix: str, at: float) -> list[tuple[str, str, VersionRow | None]]:
        """As `HistoryBackend.task_versions`: the keys with versions or rows, then one read each."""
        params = {"lo": prefix, "hi": prefix_upper_bound(prefix)}
        keys = self._conn().execute(_TASK_KEYS, params).fetchall()
        found = []
        for namespace, key in keys:
            current = self.versions(namespace, key, limit=1, at=at)
            found.append((namespace, key, current[0] if current else None))
        return found

    @_typed_errors
    def version_keys(self, prefix: str) -> list[tuple[str, str]]:
        """As `HistoryBackend.version_keys`: a range read of the version marks."""
        rows = self._conn().execute(_VERSION_KEYS, prefix_bounds(prefix))
        return [(namespace, key) for namespace, key in rows]

    @_typed_errors
    def restore_many(self, writes: list[Row], deletes: list[tuple[str, str]], stamp: Stamp) -> None:
        """As `HistoryBackend.restore_many`: the writes and deletes in one write transaction."""
        with self._write_transaction(self._conn()) as conn:
            for row in writes:
                conn.execute(
                    _SET, (row.namespace, row.key, row.value, row.expires_at, stamp.at, stamp.by)
                )
                self._append(conn, row.namespace, row.key, row.value, row.expires_at, stamp)
            for namespace, key in deletes:
                if conn.execute(_DELETE, (namespace, key)).rowcount:
                    self._append(conn, namespace, key, None, None, stamp)

    @_typed_errors
    def prune_versions(
        self, keep: int, before: float | None, limit: int, after: tuple[str, str] | None = None
    ) -> tuple[int, tuple[str, str] | None]:
        """As `StateBackend.prune_versions`: up to `limit` keys after `after` in one write
        transaction: a read of the batch's last key, then one DELETE over the batch's range (and,
        where a key's newest version may go, one statement keeping the batch's numbers)."""
        ans, akey = after or ("", "")
        params: dict[str, Any] = {
            "keep": keep, "before": -_INF if before is None else before, "ans": ans, "akey": akey,
        }  # fmt: skip
        with self._write_transaction(self._conn()) as conn:
            last = None
            if limit > 0:
                last = conn.execute(_PRUNE_UNTIL, {**params, "skip": limit - 1}).fetchone()
            params["zns"], params["zkey"] = last or (_TOP, "")
            if keep == 0 or before is not None:
                conn.execute(_KEEP_MARKS, params)
            pruned = conn.execute(_PRUNE_KEYS, params).rowcount
        return pruned, None if last is None else (last[0], last[1])

    def version_refs(self) -> Iterator[str]:
        """As `StateBackend.version_refs`: the offloaded (`@`) values among the versions."""
        try:
            for (value,) in self._conn().execute(_VERSION_REFS):
                yield value
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def scan(self, prefix: str = "") -> Iterator[Row]:
        """As `StateBackend.scan`: a primary-key range read, streamed from the cursor."""
        try:
            conn = self._conn()
            slot = self._local.slot
            slot.scans += 1
            try:
                cursor = (
                    conn.execute(_SCAN_RANGE, (prefix, prefix_upper_bound(prefix)))
                    if prefix
                    else conn.execute(_SCAN_ALL)
                )
                for row in cursor:
                    yield Row(*row)
            finally:
                slot.scans -= 1
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @_typed_errors
    def rows(
        self, namespace: str, now: float, *, key_prefix: str = "", limit: int = -1, offset: int = 0
    ) -> list[Row]:
        """As `StateBackend.rows`: a primary-key range read of the live rows."""
        params = {"ns": namespace, "lo": key_prefix, "now": now, "limit": limit, "offset": offset}
        if key_prefix:
            params["hi"] = prefix_upper_bound(key_prefix)
        sql = _ROWS_UNDER if key_prefix else _ROWS
        return [Row(*row) for row in self._conn().execute(sql, params)]

    @_typed_errors
    def count(
        self,
        prefix: str,
        now: float,
        *,
        exact: bool = False,
        key_prefix: str = "",
        cap: int | None = None,
    ) -> int:
        """As `StateBackend.count`: a counting range read, stopped at `cap`."""
        params: dict[str, Any] = {"now": now, "cap": -1 if cap is None else cap}
        if exact:
            params.update(ns=prefix, lo=key_prefix)
            if key_prefix:
                params["hi"] = prefix_upper_bound(key_prefix)
            sql = _COUNT_IN_UNDER if key_prefix else _COUNT_IN
        else:
            params.update(lo=prefix, hi=prefix_upper_bound(prefix) if prefix else _TOP)
            sql = _COUNT_RANGE
        return int(self._conn().execute(sql, params).fetchone()[0])

    @_typed_errors
    def groups(
        self,
        prefix: str,
        now: float,
        *,
        whole: bool = False,
        start: str = "",
        like: str = "",
        limit: int = -1,
    ) -> list[str]:
        """As `StateBackend.groups`: a recursive skip scan, one seek per distinct field."""
        lo = prefix + start
        params = {"lo": lo, "hi": prefix_upper_bound(lo) if lo else _TOP, "now": now}
        cursor = self._conn().execute(_GROUPS[whole], {**params, "n": len(prefix)})
        fields = (row[0] for row in cursor)
        if like:
            # Filtered here, not with SQL LIKE: SQLite's LIKE ignores ASCII case.
            match = like_matcher(like)
            fields = (field for field in fields if match(field))
        try:  # the skip scan runs as the cursor is read: it stops at `limit`
            return list(itertools.islice(fields, None if limit < 0 else limit))
        finally:
            cursor.close()  # a statement read part-way would keep its read snapshot

    @_typed_errors
    def dag_counts(self, dag_ids: list[str], now: float, *, cap: int | None = None) -> list[int]:
        """As `StateBackend.dag_counts`: the count catalog's rows, less the DAGs' expired rows
        not yet cleaned (in one read transaction, so both are of one moment). Their cost is
        that of the store's uncleaned expired rows; past `_EXPIRED_BOUND` of those, each DAG's
        range is counted instead."""
        if not dag_ids:
            return []
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            expired = _expired_by_dag(conn, now)
            if expired is None:
                return super().dag_counts(dag_ids, now, cap=cap)
            kept: dict[str, int] = {}
            for at in range(0, len(dag_ids), _IN_LIST):  # (stock SQLite: 999 variables)
                some = dag_ids[at : at + _IN_LIST]
                sql = _DAG_KEYS_OF.format(", ".join("?" * len(some)))
                kept.update(conn.execute(sql, some).fetchall())
        finally:
            conn.execute("COMMIT")
        counts = [kept.get(dag, 0) - expired.get(dag, 0) for dag in dag_ids]
        return [n if cap is None else min(n, cap) for n in counts]

    @_typed_errors
    def live_dags(
        self, now: float, limit: int, *, cap: int | None = None
    ) -> list[tuple[str, int]] | None:
        """As `StateBackend.live_dags`: the count catalog's rows in DAG order (the order of
        their namespaces: the separator sorts below every character of an id), less their
        expired rows not yet cleaned, skipping DAGs left with none; one read transaction."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            expired = _expired_by_dag(conn, now)
            if expired is None:
                return None
            found: list[tuple[str, int]] = []
            cursor = conn.execute(_DAG_KEYS_IN_ORDER)
            try:
                for dag, n in cursor:
                    live = n - expired.get(dag, 0)
                    if live > 0:
                        found.append((dag, live if cap is None else min(live, cap)))
                        if len(found) == limit:
                            break
            finally:
                cursor.close()
            return found
        finally:
            conn.execute("COMMIT")

    @_typed_errors
    def count_expired(self, now: float) -> int:
        """As `StateBackend.count_expired`: one count over the expired rows."""
        return int(self._conn().execute(_COUNT_EXPIRED, (now,)).fetchone()[0])

    @_typed_errors
    def delete_expired(self, now: float, limit: int, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.delete_expired`: one DELETE, batched by `limit` when positive."""
        if limit > 0:
            return self._deleting(_DELETE_EXPIRED_BATCH, (now, limit), stamp)
        return self._deleting(_DELETE_EXPIRED, (now,), stamp)

    @_typed_errors
    def forget_writes(self, before: float, limit: int) -> int:
        """As `StateBackend.forget_writes`: one bounded DELETE through the `written_at` index
        (and one of the update operations' kept values, which are fewer)."""
        conn = self._conn()
        conn.execute(_FORGET_OUTCOMES, (before, limit))
        return int(conn.execute(_FORGET_WRITES, (before, limit)).rowcount)

    @_typed_errors
    def schema_status(self) -> SchemaStatus:
        """As `StateBackend.schema_status`: the file's `user_version` against the migrations."""
        return SchemaStatus(_user_version(self._conn()), len(MIGRATIONS))

    @_typed_errors
    def migrate(self) -> list[int]:
        """As `StateBackend.migrate`: applies the pending migrations in one write transaction."""
        return self._migrate_on(self._conn() if self._migrated else self._open(), explicit=True)

    def _migrate_on(self, conn: sqlite3.Connection, *, explicit: bool = False) -> list[int]:
        """Bring the schema up to date. A newer schema (a newer taskstate is rolling out) is
        read and written as is, like the PostgreSQL backend does; only `migrate` refuses it."""
        applied: list[int] = []
        filling = True
        while filling:
            filling = False
            with self._write_transaction(conn):
                current = _user_version(conn) or 0
                if current > len(MIGRATIONS) and explicit:
                    raise BackendError(
                        f"{self.path} has schema version {current}, newer than this taskstate "
                        f"knows ({len(MIGRATIONS)}); upgrade taskstate"
                    )
                done = current
                for version in range(current + 1, len(MIGRATIONS) + 1):
                    for statement in _statements(MIGRATIONS[version - 1]):
                        conn.execute(statement)
                    if version == _FILLS_DAG_KEYS:  # recorded once its rows are counted
                        filling = True
                        break
                    applied.append(done := version)
                if done > current:
                    conn.execute(f"PRAGMA user_version = {done}")
            if filling:
                while not self._fill_dag_keys(conn):
                    time.sleep(_FILL_PAUSE_S)
                applied.append(_FILLS_DAG_KEYS)
        self._migrated = True
        return applied

    def _fill_dag_keys(self, conn: sqlite3.Connection) -> bool:
        """Count the rows of the next few DAGs the count catalog has not counted yet, in one
        short write transaction (other processes' writes go on between them; a process opening
        the file meanwhile takes the next DAGs). A DAG's row, which the triggers may have
        started from nothing, becomes its count at that moment: exact, since SQLite has one
        writer. True (and the step recorded) once every DAG is counted."""
        with self._write_transaction(conn):
            if (_user_version(conn) or 0) >= _FILLS_DAG_KEYS:
                return True
            row = conn.execute(f"SELECT after FROM {DAG_KEYS_FILL}").fetchone()
            after: str | None = row[0] if row else None
            until = time.monotonic() + _FILL_SLICE_S
            while True:  # one DAG at least, then more while the slice lasts
                lo = _TASKS_LO if after is None else prefix_upper_bound(task_prefix(after))
                found = conn.execute(_NEXT_TASK_NAMESPACE, (lo, _TASKS_HI)).fetchone()
                if found is None:
                    conn.execute(f"DELETE FROM {DAG_KEYS_FILL}")
                    conn.execute(f"PRAGMA user_version = {_FILLS_DAG_KEYS}")
                    return True
                after = found[0][len(_TASKS_LO) :].partition(SEP)[0]
                prefix = task_prefix(after)
                conn.execute(
                    _FILL_DAG, {"dag": after, "lo": prefix, "hi": prefix_upper_bound(prefix)}
                )
                if time.monotonic() >= until:
                    break
            conn.execute(f"UPDATE {DAG_KEYS_FILL} SET after = ?", (after,))
        return False


def _raise_if_recorded(conn: sqlite3.Connection, write_id: str, namespace: str, key: str) -> None:
    """`WriteRecorded` when the ledger holds `write_id` (in the caller's write transaction)."""
    found = conn.execute(_RECORDED, (write_id,)).fetchone()
    if found is not None:
        raise recorded_outcome(write_id, found, namespace, key)


def _field(stamp: Stamp | None, at: int) -> Any:
    """One field of the stamp of the deletion running now (None: none is)."""
    return None if stamp is None else stamp[at]


def _expired_by_dag(conn: sqlite3.Connection, now: float) -> dict[str | None, int] | None:
    """The store's rows expired and not yet cleaned, counted by DAG (None: not a task's); None
    when there are more than `_EXPIRED_BOUND` of them."""
    params = {"now": now, "bound": _EXPIRED_BOUND + 1, "lo": _TASKS_LO, "hi": _TASKS_HI}
    expired: dict[str | None, int] = dict(conn.execute(_EXPIRED_BY_DAG, params).fetchall())
    return None if sum(expired.values()) > _EXPIRED_BOUND else expired


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration step, one at a time (a trigger's body holds `;`s)."""
    statement = ""
    for part in script.split(";"):
        statement += part + ";"
        if sqlite3.complete_statement(statement):
            if statement.strip(" \n;"):
                yield statement
            statement = ""
    if statement.strip(" \n;"):
        yield statement


def _user_version(conn: sqlite3.Connection) -> int | None:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    return version or None
