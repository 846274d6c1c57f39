"""PostgreSQL backend: the shared database a multi-machine Airflow already has.

psycopg 3 with a small pool, opened lazily in each process (a forked child opens its own and
never touches the parent's sockets). Every get/set/delete is one statement on an autocommit
connection: one round trip, and one transaction, so a transaction-pooling PgBouncer hands the
server connection back after each. Nothing outlives a transaction on the server (no SET, no
session advisory lock, no temporary table), and statements are prepared on the server only on
a connection that provably ends at PostgreSQL itself (`_prepares`): a pooler multiplexes
clients over server connections, and a statement prepared on one is missing on the next (or
already there, under another client's name). Read-modify-write (`transact`) locks the row with
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
Plain one-key writes are idempotent, so they are retried even when the failure hides whether
they committed. A write whose result tells what it did — `transact`, and the counted writes
(`set_many`, clears, `delete_if`, `delete_expired`) — is run again only when it certainly did
not commit (`_once`): the failure came before COMMIT was sent, or it was lost during COMMIT and
PostgreSQL, asked afterwards by transaction id (`txid_status`), says the transaction aborted.
If it committed, that attempt's result is returned; if the server cannot say,
`OutcomeUnknownError` — nothing runs again that may have landed.

Tables carry a `taskstate_` prefix, so they can live in Airflow's metadata database beside
Airflow 3.3's `task_state_store` / `asset_state_store`. The schema is created by
`taskstate db migrate` (never implicitly: the metadata DB belongs to the Airflow admin).
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

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
    prefix_bounds,
    prefix_upper_bound,
    recorded_outcome,
)
from taskstate.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    OutcomeUnknownError,
    SchemaMissingError,
)
from taskstate.redaction import redact_url, scrub, url_secrets
from taskstate.scope import META_PREFIX, task_prefix
from taskstate.stored import etag_of

T = TypeVar("T")

TABLE = "taskstate_entries"
VERSIONS = "taskstate_versions"
MARKS = "taskstate_version_marks"
TRIM_FUNCTION = "taskstate_trim_versions"
VERSION_TABLE = "taskstate_schema_version"
WRITES = "taskstate_write_ids"
DAG_KEYS = "taskstate_dag_keys"

_HEX32 = "[0-9a-f]{32}"

# A key's identity columns in the history tables, as migration 3 made them in the state table.
_IDENTITY = (
    'namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL, '
    "namespace_md5 uuid GENERATED ALWAYS AS (md5(namespace)::uuid) STORED, "
    "key_md5 uuid GENERATED ALWAYS AS (md5(key)::uuid) STORED"
)

# A namespace short enough to be a b-tree entry whole (with its expiry): the `_live` index's
# predicate, repeated verbatim in the queries it serves (the planner matches it as written).
_SHORT = "octet_length(namespace) <= 1000"
_LONG = "octet_length(namespace) > 1000"  # (the planner does not match NOT _SHORT to _LONG)

# A task namespace (t SEP dag SEP run SEP task SEP map index): whether one is, its DAG's key in
# the count catalog, and the catalog row (of 8) it is counted in.
_IS_TASK = "left({ns}, 2) = 't' || chr(31)"
_DAG_MD5 = "md5(split_part({ns}, chr(31), 2))::uuid"
_SHARD = "hashtext({ns}) & 7"

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
    # 4: one namespace's keys in order (listings page in the database: a 20,000-key task
    # instance's first page reads one page of the index). A key is at most 512 characters, so
    # it fits a b-tree entry whole. Built without blocking writers (see `_ONLINE`).
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TABLE}_keys ON {TABLE} (namespace_md5, key)",
    # 5: history (docs/history.md): every kept version of a key, and each key's high-water
    # mark (the last version number handed out; it outlives the key and its versions, so a
    # number is never reused). New, empty tables: nothing existing is rewritten or locked, so
    # this is online however large the state table is. value NULL: a deletion. Idempotent,
    # like every step after it may be (a step is re-run when its record is missing).
    f"""
    CREATE TABLE IF NOT EXISTS {VERSIONS} (
        {_IDENTITY},
        version       bigint NOT NULL,
        value         text,
        expires_at    double precision,
        updated_at    double precision NOT NULL,
        updated_by    text,
        op            text NOT NULL,
        PRIMARY KEY (namespace_md5, key_md5, version)
    );
    CREATE INDEX IF NOT EXISTS {VERSIONS}_age ON {VERSIONS} (updated_at);
    CREATE INDEX IF NOT EXISTS {VERSIONS}_at
        ON {VERSIONS} (namespace_md5, key_md5, updated_at, version);
    CREATE TABLE IF NOT EXISTS {MARKS} (
        {_IDENTITY},
        version       bigint NOT NULL,
        PRIMARY KEY (namespace_md5, key_md5)
    );
    CREATE INDEX IF NOT EXISTS {MARKS}_order ON {MARKS} ((left(namespace, 200)));
    """,
    # 6 and 7: live-key counts of a namespace range (discovery's DAG, run and task instance
    # counts) read the index alone, not the table: every namespace of at most 1000 bytes
    # (nearly all) with its expiry, and the longer ones by their prefix (they cannot be b-tree
    # entries whole). An expression index cannot serve an index-only scan (the planner wants
    # the column itself), hence the whole namespace and the length split. The long ones' key
    # is spelled substr(), not left(): a query on it can then only use this index (the planner
    # does not know long namespaces are rare and would scan the order index's range instead).
    # Measured in docs/backends.md ("PostgreSQL layout").
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TABLE}_live ON {TABLE} (namespace) "
    f"INCLUDE (expires_at) WHERE {_SHORT}",
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TABLE}_live_long ON {TABLE} "
    f"((substr(namespace, 1, 200))) WHERE {_LONG}",
    # 8: autovacuum for a high-churn table. Every `set` leaves a dead row version (no update is
    # HOT: expires_at is indexed) and clears its page's all-visible bit, and the counts above
    # are index-only only on all-visible pages (2% of a range's rows re-set sent 100,000 of
    # its 135,000 index entries back to the table). The defaults wait for 20% of the table to
    # change: 2,000,000 rows at 10 M. Vacuum (and analyze) at 2% instead, inserts too where
    # the server has the setting (13+). Only the table's options change (SHARE UPDATE
    # EXCLUSIVE: reads and writes go on), so this is online however large the table is.
    f"""
    DO $$ BEGIN
        EXECUTE 'ALTER TABLE {TABLE} SET (autovacuum_vacuum_scale_factor = 0.02, '
            || 'autovacuum_analyze_scale_factor = 0.02'
            || CASE WHEN current_setting('server_version_num')::int >= 130000
                THEN ', autovacuum_vacuum_insert_scale_factor = 0.02' ELSE '' END || ')';
    END $$
    """,
    # 9: history's write cost (docs/history.md, "Cost"): `clean` walks the keys' marks instead
    # of an index on the versions' age, which every write paid for. Dropped without blocking
    # writers (see `_ONLINE`). Versions and numbers stay as they are.
    f"DROP INDEX CONCURRENTLY IF EXISTS {VERSIONS}_age",
    # 10: the write ledger (docs/api.md, "Write ids"): each write id a conditional write over the
    # API carried, the key it wrote and the ETag it produced (NULL: a delete), so a re-sent
    # request is answered with the first one's outcome. A new, empty table (online); pruned by
    # `clean` through `written_at`. The id is the client's (at most 64 characters).
    f"""
    CREATE TABLE IF NOT EXISTS {WRITES} (
        write_id   text COLLATE "C" PRIMARY KEY,
        namespace  text NOT NULL,
        key        text NOT NULL,
        etag       text,
        written_at double precision NOT NULL
    );
    CREATE INDEX IF NOT EXISTS {WRITES}_age ON {WRITES} (written_at);
    """,
    # 11: history's trim as a function (`_TRIM`): a write calls it only on every
    # `_TRIM_EVERY`-th number, so the other writes carry no DELETE at all (a DELETE in the
    # write's statement, even one that deletes nothing, cost about 8% of a versioned
    # `set`: bench/README.md, "History"). A new function: nothing is rewritten or locked.
    f"""
    CREATE OR REPLACE FUNCTION {TRIM_FUNCTION}(ns text, k text, top bigint, keep integer)
    RETURNS bigint LANGUAGE sql AS $$
        WITH d AS (DELETE FROM {VERSIONS}
            WHERE (namespace_md5, key_md5) = (md5(ns)::uuid, md5(k)::uuid)
            AND version <= top - keep RETURNING 1)
        SELECT count(*) FROM d
    $$
    """,
    # The ledger keeps what an update operation wrote (`outcome`, the row's text; NULL for
    # every other write), so its re-sent copy answers the first one's new value however far
    # the key has moved on since (docs/api.md, "Update operations"). A nullable column
    # without a default: a catalogue change, no rewrite.
    f"ALTER TABLE {WRITES} ADD COLUMN IF NOT EXISTS outcome text",
    # The order index on the first 200 characters of the namespace goes: no `set` is HOT (it
    # changes the indexed expiry), so each one wrote an entry into every index, each on a
    # random leaf, whose first change after a checkpoint is a full-page image in the WAL (the
    # 10 M-row store's `set` ran 1.4x the 10 k one's; without this index 1.2x: docs/backends.md,
    # "PostgreSQL layout"). Ranges, keyset scans and discovery's skip scan read `_live` and
    # `_live_long` instead (`_span`), which hold the same namespaces: the short ones whole, the
    # long ones by that same prefix. Dropped without blocking writers (see `_ONLINE`).
    f"DROP INDEX CONCURRENTLY IF EXISTS {TABLE}_order",
    # The count catalog (docs/backends.md, "Key counts of /dags"): how many rows each DAG's task
    # namespaces hold, in 8 rows per DAG (a namespace's hash picks one), so `/dags` sums 8 rows
    # per DAG instead of counting its keys, and a DAG's writers rarely wait on one another.
    # Kept in the write's own transaction, on a key's creation (a row trigger: an upsert that
    # updates fires no INSERT trigger, so an overwrite pays nothing) and deletion (a statement
    # trigger: a cleanup batch updates each row once, in key order, at the statement's end).
    # Every write path (set, CAS, delete, clear, import, restore, clean) goes through them. The
    # DAG is keyed by its id's md5 (ids written before ids were bounded may be long). Expired
    # rows not yet cleaned are subtracted when read (`_DAG_COUNTS`). The rows already there are
    # counted after this step, a DAG per short transaction (`_fill_dag_keys`). CREATE TRIGGER
    # stops writes while it commits: it gives up after 1 s and is retried, so writers never
    # queue behind it waiting for a long transaction.
    f"""
    SET LOCAL lock_timeout = '1s';
    CREATE TABLE IF NOT EXISTS {DAG_KEYS} (
        dag_md5 uuid NOT NULL,
        shard   smallint NOT NULL,
        n       bigint NOT NULL,
        PRIMARY KEY (dag_md5, shard)
    );
    CREATE OR REPLACE FUNCTION {DAG_KEYS}_created() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {DAG_KEYS} VALUES ({_DAG_MD5.format(ns="NEW.namespace")},
            {_SHARD.format(ns="NEW.namespace")}, 1)
            ON CONFLICT (dag_md5, shard) DO UPDATE SET n = {DAG_KEYS}.n + 1;
        RETURN NULL;
    END $$;
    CREATE OR REPLACE FUNCTION {DAG_KEYS}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {DAG_KEYS} SELECT {_DAG_MD5.format(ns="namespace")},
            {_SHARD.format(ns="namespace")}, -count(*) FROM gone
            WHERE {_IS_TASK.format(ns="namespace")} GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (dag_md5, shard) DO UPDATE SET n = {DAG_KEYS}.n + excluded.n;
        RETURN NULL;
    END $$;
    DROP TRIGGER IF EXISTS {DAG_KEYS}_created ON {TABLE};
    CREATE TRIGGER {DAG_KEYS}_created AFTER INSERT ON {TABLE} FOR EACH ROW
        WHEN ({_IS_TASK.format(ns="NEW.namespace")}) EXECUTE PROCEDURE {DAG_KEYS}_created();
    DROP TRIGGER IF EXISTS {DAG_KEYS}_deleted ON {TABLE};
    CREATE TRIGGER {DAG_KEYS}_deleted AFTER DELETE ON {TABLE} REFERENCING OLD TABLE AS gone
        FOR EACH STATEMENT EXECUTE PROCEDURE {DAG_KEYS}_deleted();
    """,
]
# The step that creates the count catalog: its rows are counted after it, before it is recorded.
_FILLS_DAG_KEYS = next(
    v for v, sql in enumerate(MIGRATIONS, 1) if f"TABLE IF NOT EXISTS {DAG_KEYS} " in sql
)
# Versions whose statement cannot run in a transaction (CREATE / DROP INDEX CONCURRENTLY):
# applied alone, on an autocommit connection, then recorded; each is idempotent, so a migration
# that dies midway is finished by the next `db migrate`. Value: the index it builds (checked
# valid) or drops (checked absent).
_ONLINE = {
    version: sql.split(" EXISTS ", 1)[1].split()[0]
    for version, sql in enumerate(MIGRATIONS, start=1)
    if sql.startswith(("CREATE INDEX CONCURRENTLY", "DROP INDEX CONCURRENTLY"))
}

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
# In `transact`, the write also returns its transaction's id, so that a COMMIT whose answer was
# lost can be looked up afterwards (`txid_status`; PostgreSQL >= 10, any session, any pooler).
_CREATE_XID = _CREATE + " RETURNING txid_current()"
_UPDATE_XID = (
    f"UPDATE {TABLE} SET value = %s, expires_at = %s, updated_at = %s, updated_by = %s "
    f"WHERE {_KEY} RETURNING txid_current()"
)
_XACT_STATUS = "SELECT txid_status(%s)"
_DELETE = f"DELETE FROM {TABLE} WHERE {_KEY}"
# Namespaces in [lo, hi): the truncated bounds let the order index narrow the range (cutting
# both sides of a comparison to 200 characters keeps it true in byte order). History's marks
# keep their order index; the state table's went (see `_SPAN`).
_RANGE = (
    "left(namespace, 200) >= left(%(lo)s, 200) AND left(namespace, 200) <= left(%(hi)s, 200) "
    "AND namespace >= %(lo)s AND namespace < %(hi)s"
)


def _span(lo: str, hi: str, *, short: bool) -> str:
    """The state table's namespaces in [lo, hi) on one of its two namespace indexes: the short
    ones (`_SHORT`) on `_live`, whole; the long ones on `_live_long`, by their first 200
    characters (cutting both sides of a comparison to 200 characters keeps it true in byte
    order). Every namespace is in exactly one of them; each predicate is spelled as its index's
    is, so the planner matches it."""
    if short:
        return f"namespace >= {lo} AND namespace < {hi} AND {_SHORT}"
    return (
        f"substr(namespace, 1, 200) >= left({lo}, 200) "
        f"AND substr(namespace, 1, 200) <= left({hi}, 200) "
        f"AND namespace >= {lo} AND namespace < {hi} AND {_LONG}"
    )


# (A range read as a bitmap OR of both indexes: deletes and unordered reads.)
_SPAN = f"(({_span('%(lo)s', '%(hi)s', short=True)}) OR ({_span('%(lo)s', '%(hi)s', short=False)}))"
_CLEAR_RANGE = f"DELETE FROM {TABLE} WHERE {_SPAN}"
_CLEAR_ALL = f"DELETE FROM {TABLE}"
# Keyset pages: a scan of millions of rows never holds a cursor or a transaction open. Each
# index is read in namespace order (the server sorts only the keys of one namespace, or of
# namespaces sharing 200 characters), a page from each, and the two pages merged.
_SCAN_COLUMNS = f"SELECT namespace, key, value, expires_at, updated_at, updated_by FROM {TABLE} "
_AFTER = "(namespace, key) > (%(ns)s, %(key)s)"
_SCAN_PAGE = (
    f"({_SCAN_COLUMNS} WHERE {_span('%(ns)s', '%(hi)s', short=True)} AND {_AFTER} "
    "ORDER BY namespace, key LIMIT %(limit)s) UNION ALL "
    f"({_SCAN_COLUMNS} WHERE {_span('%(ns)s', '%(hi)s', short=False)} AND {_AFTER} "
    "ORDER BY substr(namespace, 1, 200), namespace, key LIMIT %(limit)s) "
    "ORDER BY namespace, key LIMIT %(limit)s"
)
_SCAN_PAGE_SIZE = 1000
# Listings: one namespace's live keys in order, through the (namespace_md5, key) index.
_LIVE = "(expires_at IS NULL OR expires_at > %(now)s)"  # taskstate.stored.is_live in SQL
# (The namespace's hash is its identity, as for point operations: re-checking the namespace
# itself would make the planner underestimate a big namespace and sort it instead.)
_IN_NAMESPACE = (
    "namespace_md5 = md5(%(ns)s)::uuid AND key >= %(lo)s "
    f"AND (%(hi)s::text IS NULL OR key < %(hi)s) AND {_LIVE}"
)
_ROWS = f"{_SCAN_COLUMNS} WHERE {_IN_NAMESPACE} ORDER BY key LIMIT %(limit)s OFFSET %(offset)s"
_COUNT_IN = f"SELECT count(*) FROM (SELECT FROM {TABLE} WHERE {_IN_NAMESPACE} LIMIT %(cap)s) c"
# The live keys of a namespace range, counted on the indexes alone (migrations 6 and 7): the
# short namespaces on `_live` (an index-only scan, expiry included), the long ones on
# `_live_long`; each count stops at the cap, and so does their sum (least() ignores a NULL cap).
_RANGE_COUNT = (
    "least(%(cap)s, (SELECT count(*) FROM (SELECT FROM {t} WHERE namespace >= {lo} "
    f"AND namespace < {{hi}} AND {_SHORT} AND {_LIVE} LIMIT %(cap)s) s) + "
    "(SELECT count(*) FROM (SELECT FROM {t} WHERE substr(namespace, 1, 200) >= left({lo}, 200) "
    "AND substr(namespace, 1, 200) <= left({hi}, 200) AND namespace >= {lo} AND namespace < {hi} "
    f"AND {_LONG} AND {_LIVE} LIMIT %(cap)s) l))"
)
_COUNT_RANGE = "SELECT " + _RANGE_COUNT.format(t=TABLE, lo="%(lo)s", hi="%(hi)s")
# Discovery's key counts of one page, in one round trip: a bounded count per namespace or range.
_EACH = "FROM unnest(%(a)s::text[], %(b)s::text[]) WITH ORDINALITY AS p(lo, hi, i) ORDER BY p.i"
_COUNT_EACH_IN = (
    f"SELECT (SELECT count(*) FROM (SELECT FROM {TABLE} WHERE namespace_md5 = md5(p.lo)::uuid "
    f"AND {_LIVE} LIMIT %(cap)s) c) {_EACH}"
)
_COUNT_EACH_RANGE = f"SELECT {_RANGE_COUNT.format(t=TABLE, lo='p.lo', hi='p.hi')} {_EACH}"
# Discovery: a skip scan over the namespace indexes, one seek per distinct field: the first
# live namespace at or past `at`, then past its field (the namespace with the field's end bumped
# from the separator, \x1f, to " "). The lesser of two seeks: the short namespaces' (`_live`,
# which holds the expiry: the index alone answers) and the long ones' (`_live_long`, in order
# of their first 200 characters; the server sorts only namespaces sharing those). One
# subquery each: half the planning time of a prefix seek followed by a min().
_FIRST_FROM = (
    f"least((SELECT namespace FROM {TABLE} WHERE {_span('{at}', '%(hi)s', short=True)} "
    f"AND {_LIVE} ORDER BY namespace LIMIT 1), "
    f"(SELECT namespace FROM {TABLE} WHERE {_span('{at}', '%(hi)s', short=False)} "
    f"AND {_LIVE} ORDER BY substr(namespace, 1, 200), namespace LIMIT 1))"
)
_REST = "substr(ns, %(n)s + 1)"
_FIELD_END = f"strpos({_REST}, chr(31))"
_NEXT = {
    True: "ns || chr(1)",
    False: f"CASE {_FIELD_END} WHEN 0 THEN ns || chr(1) "
    f"ELSE left(ns, %(n)s + {_FIELD_END} - 1) || ' ' END",
}
_FIELD = {
    True: _REST,
    False: f"CASE {_FIELD_END} WHEN 0 THEN {_REST} "
    f"ELSE substr(ns, %(n)s + 1, {_FIELD_END} - 1) END",
}
_GROUPS = {
    whole: (
        f"WITH RECURSIVE skip(ns) AS (SELECT {_FIRST_FROM.format(at='%(lo)s')} "
        f"UNION ALL SELECT {_FIRST_FROM.format(at=_NEXT[whole])} FROM skip WHERE ns IS NOT NULL) "
        f"SELECT field FROM (SELECT {_FIELD[whole]} AS field FROM skip WHERE ns IS NOT NULL) f "
        "WHERE %(like)s = '' OR field LIKE %(like)s LIMIT %(limit)s"
    )
    for whole in (True, False)
}
_TOP = "\U0010ffff"  # above every namespace (each starts with a kind letter)
_COUNT_EXPIRED = f"SELECT count(*) FROM {TABLE} WHERE expires_at <= %s"
# `/dags`' key counts in one statement (one snapshot): each DAG's catalog rows, less its rows
# expired and not yet cleaned, found through the expiry index: at most `_EXPIRED_BOUND` + 1 of
# them store-wide (each row also says how many that was; more than the bound: range counts).
_DAG_COUNTS = (
    f"WITH x AS (SELECT namespace FROM {TABLE} WHERE expires_at <= %(now)s LIMIT %(bound)s), "
    "gone AS (SELECT split_part(namespace, chr(31), 2) AS dag, count(*) AS n FROM x "
    f"WHERE {_IS_TASK.format(ns='namespace')} GROUP BY 1) "
    # Until the catalog's step is recorded its rows may not be counted yet (a `db migrate`
    # filling it while this taskstate already serves): answer as if past the bound.
    f"SELECT CASE WHEN EXISTS (SELECT FROM {VERSION_TABLE} WHERE version = %(filled)s) "
    "THEN (SELECT count(*) FROM x) ELSE %(bound)s END, "
    f"(SELECT coalesce(sum(n), 0) FROM {DAG_KEYS} WHERE dag_md5 = md5(p.dag)::uuid) "
    "- coalesce(gone.n, 0) FROM unnest(%(dags)s::text[]) WITH ORDINALITY AS p(dag, i) "
    "LEFT JOIN gone ON gone.dag = p.dag ORDER BY p.i"
)
_EXPIRED_BOUND = DAG_COUNTS_EXPIRED_BOUND
# Filling the catalog for the rows already there, one DAG per transaction: its 8 rows made and
# locked (a writer creating or deleting one of its keys waits: its trigger updates them), then
# set to the DAG's count at that moment (what a writer waiting on them adds comes after).
_FILL_ROWS = (
    f"INSERT INTO {DAG_KEYS} SELECT md5(%(dag)s)::uuid, s, 0 FROM generate_series(0, 7) AS s "
    "ON CONFLICT DO NOTHING"
)
_FILL_LOCK = f"SELECT FROM {DAG_KEYS} WHERE dag_md5 = md5(%(dag)s)::uuid ORDER BY shard FOR UPDATE"
_FILL_COUNT = (
    f"WITH c AS (SELECT {_SHARD.format(ns='namespace')} AS shard FROM {TABLE} "
    f"WHERE namespace >= %(lo)s AND namespace < %(hi)s AND {_SHORT} UNION ALL "
    f"SELECT {_SHARD.format(ns='namespace')} FROM {TABLE} WHERE substr(namespace, 1, 200) >= "
    "left(%(lo)s, 200) AND substr(namespace, 1, 200) <= left(%(hi)s, 200) "
    f"AND namespace >= %(lo)s AND namespace < %(hi)s AND {_LONG}), "
    "g AS (SELECT shard, count(*) AS n FROM c GROUP BY 1) "
    f"UPDATE {DAG_KEYS} k SET n = coalesce((SELECT n FROM g WHERE g.shard = k.shard), 0) "
    "WHERE k.dag_md5 = md5(%(dag)s)::uuid"
)
_FILL_BATCH = 100  # DAGs found per skip-scan query while filling
# History: one statement per write (one round trip, as without history). `w` is what the write
# changed (namespace, key, value, expires_at; value NULL for a deletion); each such key of user
# state takes the next number from its mark and appends a version; on every `_TRIM_EVERY`-th
# number the write also trims the key's versions past the number kept, in one DELETE inside
# `TRIM_FUNCTION` (the other writes execute no DELETE: bench/README.md, "History"). Reads never
# see past the number kept (`_WINDOW`), so a key holds fewer than kept + `_TRIM_EVERY` rows.
_TRIM_EVERY = 16
_NAMED_KEY = "(namespace_md5, key_md5) = (md5(%(ns)s)::uuid, md5(%(key)s)::uuid)"
_MARK = (
    f"m AS (INSERT INTO {MARKS} (namespace, key, version) "
    "SELECT namespace, key, 1 FROM w WHERE left(namespace, 2) <> %(meta)s "
    f"ON CONFLICT (namespace_md5, key_md5) DO UPDATE SET version = {MARKS}.version + 1 "
    "RETURNING namespace, key, version), "
    f"v AS (INSERT INTO {VERSIONS} "
    "(namespace, key, version, value, expires_at, updated_at, updated_by, op) "
    "SELECT m.namespace, m.key, m.version, {value}, %(at)s, %(by)s, %(op)s {source} RETURNING 1) "
)
_MARK_AND_KEEP = _MARK.format(
    value="w.value, w.expires_at",
    source="FROM m JOIN w ON m.namespace = w.namespace AND m.key = w.key",
)
# (A plain CTE runs only when read: each statement below reads `t`.)
_TRIM = (
    f", t AS (SELECT {TRIM_FUNCTION}(namespace, key, version, %(keep)s) FROM m "
    f"WHERE version %% {_TRIM_EVERY} = 0) "
)
# A `set` writes one row, so its version takes the value and expiry from the parameters: no
# join with the row written (a join of the two CTEs cost about 0.05x of an unversioned `set`'s
# CPU: bench/history_statements.py, "v from m").
_SET_KEPT = (
    f"WITH w AS (INSERT INTO {TABLE} (namespace, key, value, expires_at, updated_at, updated_by) "
    "VALUES (%(ns)s, %(key)s, %(value)s, %(exp)s, %(at)s, %(by)s) "
    "ON CONFLICT (namespace_md5, key_md5) DO UPDATE SET value = excluded.value, "
    "expires_at = excluded.expires_at, updated_at = excluded.updated_at, "
    "updated_by = excluded.updated_by RETURNING namespace, key), "
    f"{_MARK.format(value='%(value)s, %(exp)s', source='FROM m')}{_TRIM}SELECT count(*) FROM t"
)
_APPEND = (
    'WITH w AS (SELECT %(ns)s::text COLLATE "C" AS namespace, %(key)s::text COLLATE "C" AS key, '
    "%(value)s::text AS value, %(exp)s::float8 AS expires_at), "
    f"{_MARK_AND_KEEP}{_TRIM}SELECT count(*) FROM t"
)
# A DELETE (named parameters) that records a deletion version of each row it removes.
_GONE_KEPT = (
    "WITH w AS ({delete} RETURNING namespace, key, NULL::text AS value, "
    f"NULL::float8 AS expires_at), {_MARK_AND_KEEP}{_TRIM}"
    "SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM t)"
)
_DELETE_NAMED = f"DELETE FROM {TABLE} WHERE {_NAMED_KEY}"
_DELETE_IF_NAMED = (
    _DELETE_NAMED + " AND value = %(was)s AND expires_at IS NOT DISTINCT FROM %(was_exp)s"
    " AND updated_by IS NOT DISTINCT FROM %(was_by)s AND updated_at = %(was_at)s"
)
_CLEAR_NAMED = f"DELETE FROM {TABLE} WHERE namespace_md5 = md5(%(ns)s)::uuid"
_DELETE_EXPIRED_NAMED = f"DELETE FROM {TABLE} WHERE expires_at <= %(now)s"
# One batch: pick victims through the expires_at index, delete them by physical address (a TID
# scan, no second index lookup). The outer `expires_at <= %(now)s` is re-checked on a row a
# writer re-set meanwhile, so a key refreshed during cleanup survives.
_DELETE_EXPIRED_BATCH_NAMED = (
    f"DELETE FROM {TABLE} WHERE ctid = ANY(ARRAY("
    f"SELECT ctid FROM {TABLE} WHERE expires_at <= %(now)s LIMIT %(limit)s)) "
    "AND expires_at <= %(now)s"
)
_VERSION_COLUMNS = "version, value, expires_at, updated_at, updated_by, op"
# Importing an export's versions (`set_many`); parameters positional, as `_KEY`.
_MARK_FOR_UPDATE = f"SELECT version FROM {MARKS} WHERE {_KEY} FOR UPDATE"
_EXISTS = f"SELECT 1 FROM {TABLE} WHERE {_KEY}"
_APPEND_IMPORTED = (
    f"INSERT INTO {VERSIONS} "
    "(namespace, key, version, value, expires_at, updated_at, updated_by, op) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
_RAISE_MARK = (
    f"INSERT INTO {MARKS} (namespace, key, version) VALUES (%s, %s, %s) "
    f"ON CONFLICT (namespace_md5, key_md5) DO UPDATE SET "
    f"version = greatest({MARKS}.version, excluded.version)"
)
_TRIM_TO = f"DELETE FROM {VERSIONS} WHERE {_KEY} AND version <= %s"
# The versions a read sees: the newest `%(keep)s` numbers (writes trim the older ones in batches).
_WINDOW = (
    f"version > coalesce((SELECT version FROM {VERSIONS} WHERE {_NAMED_KEY} "
    "ORDER BY version DESC LIMIT 1), 0) - %(keep)s"
)
_HISTORY = (
    f"SELECT {_VERSION_COLUMNS} FROM {VERSIONS} WHERE {_NAMED_KEY} AND {_WINDOW} "
    "ORDER BY version DESC LIMIT %(limit)s"
)
# As of an instant: through the (namespace_md5, key_md5, updated_at) index, one seek.
_VERSIONS_AT = (
    f"SELECT {_VERSION_COLUMNS} FROM {VERSIONS} WHERE {_NAMED_KEY} AND updated_at <= %(at)s "
    f"AND {_WINDOW} ORDER BY updated_at DESC, version DESC LIMIT %(limit)s"
)
_VERSION = (
    f"SELECT {_VERSION_COLUMNS} FROM {VERSIONS} WHERE {_NAMED_KEY} AND version = %(v)s "
    f"AND {_WINDOW}"
)
_FIRST_VERSION = f"SELECT min(version) FROM {VERSIONS} WHERE {_NAMED_KEY} AND {_WINDOW}"
# Every key of a task instance that ever had a version (its mark) or has a row.
_VERSION_KEYS = f"SELECT namespace, key FROM {MARKS} WHERE {_RANGE} ORDER BY 1, 2"
_TASK_KEYS = (
    f"SELECT namespace, key FROM {MARKS} WHERE {_RANGE} "
    f"UNION SELECT namespace, key FROM {TABLE} WHERE {_SPAN} ORDER BY 1, 2"
)
# One batch of `clean`'s walk over the keys' marks (every key with history has one, which each
# write raises): per key, its versions past the number kept or older than `before` (but the
# newest of a live key) deleted, its mark kept at least at its newest number. Returns how many
# went, how many keys it saw, and the last. Every read of another table is a probe per key of
# the batch (a scalar subquery, or an array of the rows' addresses per key): as joins, the
# planner hashed the whole marks, versions or entries table for each batch of 1,000 keys
# whenever its statistics were behind (a `clean` right after its deletion had written 100,000
# versions: 4.9 s of pruning for 100,000 keys, bench/cleanup_history.py).
_PAIR = "(v.namespace_md5, v.key_md5) = (k.namespace_md5, k.key_md5)"
_PRUNE = (
    f"WITH k AS (SELECT namespace_md5, key_md5 FROM {MARKS} "
    "WHERE (namespace_md5, key_md5) > (%(ns)s::uuid, %(key)s::uuid) "
    "ORDER BY namespace_md5, key_md5 LIMIT %(limit)s), "
    f"t AS (SELECT k.namespace_md5, k.key_md5, (SELECT max(v.version) FROM {VERSIONS} v "
    f"WHERE {_PAIR}) AS top, coalesce((SELECT true FROM {TABLE} v WHERE {_PAIR}), false) "
    "AS live FROM k), "
    f"up AS (UPDATE {MARKS} SET version = greatest(version, (SELECT max(v.version) "
    f"FROM {VERSIONS} v WHERE (v.namespace_md5, v.key_md5) = "
    f"({MARKS}.namespace_md5, {MARKS}.key_md5))) WHERE ctid = ANY(ARRAY(SELECT (SELECT v.ctid "
    f"FROM {MARKS} v WHERE {_PAIR} AND v.version < k.top) FROM t k))), "
    f"d AS (DELETE FROM {VERSIONS} WHERE ctid = ANY(ARRAY(SELECT unnest(ARRAY(SELECT v.ctid "
    f"FROM {VERSIONS} v WHERE {_PAIR} AND (v.version <= k.top - %(keep)s "
    "OR (v.updated_at < %(before)s AND NOT (v.version = k.top AND k.live))))) FROM t k)) "
    "RETURNING 1) "
    "SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM k), (SELECT ARRAY["
    "namespace_md5::text, key_md5::text] FROM k ORDER BY namespace_md5 DESC, key_md5 DESC LIMIT 1)"
)
_VERSION_REFS_PAGE = (
    f"SELECT namespace_md5, key_md5, version, value FROM {VERSIONS} "
    "WHERE (namespace_md5, key_md5, version) > (%(ns)s, %(key)s, %(v)s) "
    "ORDER BY namespace_md5, key_md5, version LIMIT %(limit)s"
)
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# The write ledger. Recording is `ON CONFLICT DO NOTHING`: a duplicate that got past the
# lookup (the key did not exist, so there was no row to lock) finds the id taken, waits for
# the first request's transaction, and starts over, now finding it recorded.
_RECORDED = f"SELECT namespace, key, etag, outcome FROM {WRITES} WHERE write_id = %s"
_RECORD = (
    f"INSERT INTO {WRITES} (write_id, namespace, key, etag, written_at, outcome) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (write_id) DO NOTHING RETURNING 1"
)
_FORGET_WRITES = (
    f"DELETE FROM {WRITES} WHERE ctid = ANY(ARRAY("
    f"SELECT ctid FROM {WRITES} WHERE written_at < %s LIMIT %s))"
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
# Our own URL parameter (taken out before libpq, which refuses unknown ones): server-side
# prepared statements on every connection, on none, or where they are safe (the default).
_PREPARE_MODES: dict[str, bool | None] = {"auto": None, "on": True, "off": False}
_PSYCOPG_PREPARE_THRESHOLD = 5  # psycopg's default
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


def take_prepare_option(conninfo: str) -> tuple[str, bool | None]:
    """The URL without our `prepare=auto|on|off`, and that setting (None: auto)."""
    base, sep, query = conninfo.partition("?")
    if not sep:
        return conninfo, None
    kept, mode = [], None
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name != "prepare":
            kept.append(item)
        elif value.lower() in _PREPARE_MODES:
            mode = _PREPARE_MODES[value.lower()]
        else:
            raise ConfigError(
                f"prepare={value!r} in the PostgreSQL URL {redact_url(conninfo)!r}: write "
                "prepare=auto (the default), prepare=on or prepare=off"
            )
    return base + ("?" + "&".join(kept) if kept else ""), mode


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
    """The connection broke while COMMIT was in flight: transaction `xid` may have committed,
    and if it did, `transact` returns `result`."""

    def __init__(self, xid: int, result: object) -> None:
        super().__init__(xid)
        self.xid, self.result = xid, result


class _StartOver(Exception):
    """Roll this transaction back and run it again (a key created concurrently: lock it)."""


def _txid(conn: psycopg.Connection[Any]) -> int:
    """The current transaction's id, asked before its COMMIT (see `PostgresBackend._once`)."""
    row = conn.execute("SELECT txid_current()").fetchone()
    assert row is not None
    return int(row[0])


class PostgresBackend(HistoryBackend):
    """A `HistoryBackend` on a PostgreSQL database, through a small per-process pool."""

    records_writes = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        retry_window_s: float = 30.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._conninfo, self._prepare_mode = take_prepare_option(conninfo_from_url(url))
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
        """As `StateBackend.describe`: `postgresql://` and the server, without credentials."""
        return f"postgresql://{self.server}"

    # -- connections ------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        given = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        # prepare_threshold=None: no server-side prepared statement at all, not even the hot
        # statements' `prepare=True` (psycopg would otherwise also prepare any statement on its
        # fifth use); that breaks behind a transaction-pooling PgBouncer. `_configure` turns
        # them back on for pooled connections where they are safe.
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
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
                    # Not a bound method: the pool must not keep the backend alive (its
                    # finaliser closes the pool).
                    configure=functools.partial(_configure, mode=self._prepare_mode),
                    # Connections only on demand: with min_size=1 the pool grows a second one
                    # whenever a caller waits for the first (at start, after an outage), so a
                    # single-threaded task held two. Now it holds exactly the ones it uses at
                    # once, and closes one left unused for max_idle (10 min).
                    min_size=0,
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
        """As `StateBackend.close`: closes this process's pool (reopened on next use)."""
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
        """As `StateBackend.get`: one prepared SELECT by key."""

        def op(conn: _Connection) -> Entry | None:
            cursor = conn.hot()
            cursor.execute(_GET, (namespace, key), prepare=True)
            row = cursor.fetchone()
            return None if row is None else Entry(*row)

        return self._run(op)

    def may_be_recorded(self, write_id: str) -> bool:
        """As `StateBackend.may_be_recorded`: one prepared SELECT of the ledger."""

        def op(conn: _Connection) -> bool:
            cursor = conn.hot()
            cursor.execute(_RECORDED, (write_id,), prepare=True)
            return cursor.fetchone() is not None

        return self._run(op)

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
        """As `HistoryBackend.set`: one upsert; with a stamp, that statement adds the version."""
        if stamp is None or not self.history_versions:
            params = (namespace, key, value, expires_at, now, updated_by)
            self._run(lambda conn: conn.hot().execute(_SET, params, prepare=True))
            return
        kept = self._kept(namespace, key, value, expires_at, stamp._replace(at=now, by=updated_by))
        self._run(lambda conn: conn.hot().execute(_SET_KEPT, kept, prepare=True))

    def _kept(
        self, namespace: str, key: str, value: str | None, expires_at: float | None, stamp: Stamp
    ) -> dict[str, Any]:
        """The parameters of a statement that records a version (`_MARK_AND_KEEP`)."""
        return {
            "ns": namespace, "key": key, "value": value, "exp": expires_at, "at": stamp.at,
            "by": stamp.by, "op": stamp.op, "meta": META_PREFIX, "keep": self.history_versions,
        }  # fmt: skip

    def _deleting(
        self,
        sql: str,
        params: dict[str, Any],
        stamp: Stamp | None,
        *,
        prepare: bool = False,
        counted: bool = True,
        ranged: bool = False,
    ) -> int:
        """Run a DELETE; with a stamp (and history on), a deletion version of each row gone,
        in the same statement. `counted`: the count it returns is what happened, so a lost
        COMMIT follows `_once`; otherwise (one key's delete, idempotent) it is simply retried.
        `ranged`: it deletes namespace ranges (`_span`; a counted delete is a transaction)."""
        statement, values = self._deletion(sql, params, stamp)

        def op(conn: _Connection) -> int:
            if ranged:
                _no_jit(conn)
            return _deleted(conn.execute(statement, values, prepare=prepare), statement is sql)

        if not counted:
            return self._run(op)
        return self._once(lambda conn: (op(conn), _txid(conn)), "a delete of many keys")

    def _deletion(
        self, sql: str, params: dict[str, Any], stamp: Stamp | None
    ) -> tuple[str, dict[str, Any]]:
        """The statement `_deleting` runs: `sql` itself, or with a stamp (and history on) the
        statement that also records a deletion version of each row it removes."""
        if stamp is None or not self.history_versions:
            return sql, params
        values = {
            **params,
            "at": stamp.at,
            "by": stamp.by,
            "op": stamp.op,
            "meta": META_PREFIX,
            "keep": self.history_versions,
        }
        return _GONE_KEPT.format(delete=sql), values

    def delete(self, namespace: str, key: str, stamp: Stamp | None = None) -> None:
        """As `HistoryBackend.delete`: one DELETE (with a stamp, recording the deletion too)."""
        if stamp is None or not self.history_versions:
            self._run(lambda conn: conn.hot().execute(_DELETE, (namespace, key), prepare=True))
            return
        params = {"ns": namespace, "key": key}
        self._deleting(_DELETE_NAMED, params, stamp, prepare=True, counted=False)

    def delete_if(
        self,
        namespace: str,
        key: str,
        version: Entry,
        stamp: Stamp | None = None,
        write_id: str | None = None,
    ) -> bool:
        """As `HistoryBackend.delete_if`: a DELETE matching every column of `version`; with a
        `write_id`, the row locked first, the id looked up, and recorded if it went."""
        params = {
            "ns": namespace, "key": key, "was": version.value, "was_exp": version.expires_at,
            "was_by": version.updated_by, "was_at": version.updated_at,
        }  # fmt: skip
        if write_id is None:
            return self._deleting(_DELETE_IF_NAMED, params, stamp) > 0
        statement, values = self._deletion(_DELETE_IF_NAMED, params, stamp)

        def body(conn: _Connection) -> tuple[bool, int | None]:
            conn.execute(_LOCK, (namespace, key), prepare=True)
            _raise_if_recorded(conn, write_id, namespace, key)
            if _deleted(conn.execute(statement, values), statement is _DELETE_IF_NAMED) == 0:
                return False, None
            _record(conn, write_id, namespace, key, None, time.time())
            return True, _txid(conn)

        return self._once(body, "a conditional delete")

    def clear(self, namespace: str, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.clear`: one DELETE on the namespace, applied once (`_once`)."""
        return self._deleting(_CLEAR_NAMED, {"ns": namespace}, stamp, prepare=True)

    def clear_prefix(self, prefix: str, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.clear_prefix`: one DELETE over the namespace range."""
        if not prefix:
            return self._deleting(_CLEAR_ALL, {}, stamp)
        bounds = {"lo": prefix, "hi": prefix_upper_bound(prefix)}
        return self._deleting(_CLEAR_RANGE, bounds, stamp, ranged=True)

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
        """As `HistoryBackend.transact`: the row locked `FOR UPDATE`, applied once (`_once`).
        A `write_id` is looked up once the row is locked (so a request re-sent with it waits
        for the first, then sees its record) and recorded with the write."""
        keeps = stamp is not None and self.history_versions > 0

        def body(conn: _Connection) -> tuple[T, int | None]:
            row = conn.execute(_LOCK, (namespace, key), prepare=True).fetchone()
            if write_id is not None:
                _raise_if_recorded(conn, write_id, namespace, key)
            new, result = fn(None if row is None else Entry(*row))
            if new is None:
                return result, None
            stored = (new.value, new.expires_at, now, new.updated_by)
            if row is not None:
                query, params = _UPDATE_XID, [*stored, namespace, key]
            else:
                query, params = _CREATE_XID, [namespace, key, *stored]
            got = conn.execute(query, params, prepare=True).fetchone()
            if got is None:
                raise _StartOver  # created concurrently: start over and lock that row
            if keeps and stamp is not None:
                at = stamp._replace(at=now, by=new.updated_by)
                kept = self._kept(namespace, key, new.value, new.expires_at, at)
                conn.execute(_APPEND, kept, prepare=True)
            if write_id is not None:
                etag = etag_of(new.value, new.expires_at, new.updated_by, now)
                outcome = new.value if keep_value else None
                _record(conn, write_id, namespace, key, etag, now, outcome)
            return result, int(got[0])

        return self._once(body, "an atomic update")

    def _once(self, body: Callable[[_Connection], tuple[T, int | None]], what: str) -> T:
        """Run a write whose result tells what it did (`fn`'s result, a count) so that it is
        never applied twice nor reported wrong — the lost-COMMIT rule, in one place. `body` runs
        in one transaction and returns (its result, the transaction's id, or None when it wrote
        nothing). A failure before COMMIT was sent rolled it back: `_run` runs it again. A
        connection lost during COMMIT: PostgreSQL is asked on another session (`txid_status`)
        — committed: this attempt's result; aborted: run again (within the retry window);
        cannot say: `OutcomeUnknownError`, and it is not run again."""

        def attempt(conn: _Connection) -> T:
            while True:
                done: tuple[T, int | None] | None = None
                try:
                    with conn.transaction():
                        done = body(conn)
                    return done[0]
                except _StartOver:
                    continue  # rolled back; a new transaction sees what made it start over
                except psycopg.OperationalError as exc:
                    if done is not None and done[1] is not None:  # COMMIT was sent
                        raise _CommitOutcomeUnknown(done[1], done[0]) from exc
                    raise  # before COMMIT: the server rolled it back, so `_run` may retry

        backoff = Backoff(self._retry_window_s)
        while True:
            try:
                return self._run(attempt)
            except _CommitOutcomeUnknown as lost:
                if self._committed(lost.xid, what):
                    return lost.result  # type: ignore[return-value]  # that attempt's
                # Certainly not applied: run it again on whatever the rows hold now.
                if not backoff.pause():
                    raise BackendUnavailableError(
                        f"PostgreSQL at {self.server} is unavailable: {backoff.attempts} "
                        f"attempts over {self._retry_window_s:.0f}s lost the connection while "
                        f"committing {what}, and none of them was applied"
                    ) from lost.__cause__

    def _committed(self, xid: int, what: str) -> bool:
        """Whether transaction `xid`, whose COMMIT lost its answer, committed; asked on another
        session (it may still be finishing: "in progress" is asked again)."""
        backoff = Backoff(self._retry_window_s)
        cause: BaseException | None = None
        while True:
            try:
                row = self._run(lambda conn: conn.execute(_XACT_STATUS, (xid,)).fetchone())
            except BackendUnavailableError as exc:
                row, cause = None, exc
            status = row[0] if row is not None else None
            if status in ("committed", "aborted"):
                return bool(status == "committed")
            if cause is not None or status != "in progress" or not backoff.pause():
                raise OutcomeUnknownError(
                    f"lost the connection to PostgreSQL at {self.server} while committing "
                    f"{what}, and could not find out afterwards whether it was applied "
                    f"(transaction {xid} is {status or 'unknown'}); it was not applied again, "
                    "so it cannot apply twice. Read the state to see which"
                ) from cause

    def set_many(
        self,
        rows: list[Row],
        *,
        replace: bool = True,
        stamp: Stamp | None = None,
        versions: Sequence[KeyVersion] = (),
    ) -> int:
        """As `HistoryBackend.set_many`: every row (and its versions) in one transaction."""
        if stamp is not None and self.history_versions:
            return self._set_many_kept(rows, replace, stamp, versions)

        def body(conn: _Connection) -> tuple[int, int | None]:
            with conn.cursor() as cursor:
                cursor.executemany(_SET if replace else _CREATE, rows)  # `Row` order
                return cursor.rowcount, _txid(conn)

        return self._once(body, "an import")

    def _set_many_kept(
        self, rows: list[Row], replace: bool, stamp: Stamp, versions: Sequence[KeyVersion]
    ) -> int:
        """`set_many` recording a version of each row written (stamped `stamp.at`: the import
        time), after the export's `versions`, in one transaction."""

        def body(conn: _Connection) -> tuple[int, int | None]:
            written = 0
            self._import_versions(conn, versions, replace)
            for r in rows:
                params = self._kept(
                    r.namespace, r.key, r.value, r.expires_at, stamp._replace(by=r.updated_by)
                )
                if replace:
                    conn.execute(_SET, r)
                    conn.execute(_APPEND, params)
                    written += 1
                elif conn.execute(_CREATE, r).rowcount:
                    conn.execute(_APPEND, params)
                    written += 1
            return written, _txid(conn)

        return self._once(body, "an import")

    def _import_versions(
        self, conn: psycopg.Connection[Any], versions: Sequence[KeyVersion], replace: bool
    ) -> None:
        """An export's versions, in the caller's transaction (`HistoryBackend.set_many`); the
        mark's row lock keeps a concurrent writer from taking a number meanwhile."""

        def mark(namespace: str, key: str) -> int | None:
            row = conn.execute(_MARK_FOR_UPDATE, (namespace, key)).fetchone()
            return None if row is None else int(row[0])

        def exists(namespace: str, key: str) -> bool:
            return conn.execute(_EXISTS, (namespace, key)).fetchone() is not None

        for namespace, key, rows, top in imported_versions(versions, replace, exists, mark):
            with conn.cursor() as cursor:
                cursor.executemany(_APPEND_IMPORTED, rows)
            conn.execute(_RAISE_MARK, (namespace, key, top))
            conn.execute(_TRIM_TO, (namespace, key, top - self.history_versions))

    # -- history ----------------------------------------------------------------------------

    def versions(
        self, namespace: str, key: str, *, limit: int, at: float | None = None
    ) -> list[VersionRow]:
        """As `HistoryBackend.versions`: newest first, or the versions as of `at`; one SELECT."""
        params = {
            "ns": namespace,
            "key": key,
            "limit": limit,
            "at": at,
            "keep": self.history_versions,
        }
        sql = _HISTORY if at is None else _VERSIONS_AT
        rows = self._run(lambda conn: conn.execute(sql, params, prepare=True).fetchall())
        return [VersionRow(*row) for row in rows]

    def version(self, namespace: str, key: str, version: int) -> VersionRow | None:
        """As `HistoryBackend.version`: one primary-key SELECT on the versions table."""
        params = {"ns": namespace, "key": key, "v": version, "keep": self.history_versions}
        row = self._run(lambda conn: conn.execute(_VERSION, params).fetchone())
        return None if row is None else VersionRow(*row)

    def first_version(self, namespace: str, key: str) -> int | None:
        """As `HistoryBackend.first_version`: the key's lowest version still kept."""
        params = {"ns": namespace, "key": key, "keep": self.history_versions}
        row = self._run(lambda conn: conn.execute(_FIRST_VERSION, params).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def task_versions(self, prefix: str, at: float) -> list[tuple[str, str, VersionRow | None]]:
        """As `HistoryBackend.task_versions`: the keys with versions or rows, then one read each."""
        bounds = {"lo": prefix, "hi": prefix_upper_bound(prefix)}
        keys = self._run(functools.partial(_fetch_ranged, sql=_TASK_KEYS, params=bounds))
        found: list[tuple[str, str, VersionRow | None]] = []
        for namespace, key in keys:
            current = self.versions(namespace, key, limit=1, at=at)
            found.append((namespace, key, current[0] if current else None))
        return found

    def version_keys(self, prefix: str) -> list[tuple[str, str]]:
        """As `HistoryBackend.version_keys`: a range read of the version marks."""
        bounds = prefix_bounds(prefix)
        rows = self._run(lambda conn: conn.execute(_VERSION_KEYS, bounds).fetchall())
        return [(namespace, key) for namespace, key in rows]

    def restore_many(self, writes: list[Row], deletes: list[tuple[str, str]], stamp: Stamp) -> None:
        """As `HistoryBackend.restore_many`: the writes and deletes in one transaction."""

        def op(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                for r in writes:
                    conn.execute(_SET_KEPT, self._kept(r.namespace, r.key, r.value, r.expires_at,
                                                       stamp))  # fmt: skip
                for namespace, key in deletes:
                    params = {"ns": namespace, "key": key, "at": stamp.at, "by": stamp.by,
                              "op": stamp.op, "meta": META_PREFIX,
                              "keep": self.history_versions}  # fmt: skip
                    conn.execute(_GONE_KEPT.format(delete=_DELETE_NAMED), params)

        self._run(op)

    def prune_versions(
        self, keep: int, before: float | None, limit: int, after: tuple[str, str] | None = None
    ) -> tuple[int, tuple[str, str] | None]:
        """As `StateBackend.prune_versions`: one statement over a page of the marks."""
        at = after or (_ZERO_UUID, _ZERO_UUID)
        params = {
            "keep": keep, "before": -_INF if before is None else before, "limit": limit or None,
            "ns": at[0], "key": at[1],
        }  # fmt: skip
        row = self._run(lambda conn: conn.execute(_PRUNE, params).fetchone())
        assert row is not None
        pruned, seen, last = int(row[0]), int(row[1]), row[2]
        return pruned, None if not limit or seen < limit else (last[0], last[1])

    def version_refs(self) -> Iterator[str]:
        """As `StateBackend.version_refs`: the offloaded (`@`) values, read a page at a time."""
        after: dict[str, Any] = {"ns": _ZERO_UUID, "key": _ZERO_UUID, "v": 0}
        while True:
            page = {**after, "limit": _SCAN_PAGE_SIZE}
            rows = self._run(functools.partial(_fetch_all, sql=_VERSION_REFS_PAGE, params=page))
            for row in rows:
                if row[3] is not None and row[3].startswith("@"):
                    yield row[3]
            if len(rows) < _SCAN_PAGE_SIZE:
                return
            after = {"ns": rows[-1][0], "key": rows[-1][1], "v": rows[-1][2]}

    def scan(self, prefix: str = "") -> Iterator[Row]:
        """As `StateBackend.scan`: keyset pages of 1,000 rows, no cursor or transaction held."""
        after = (prefix, "")
        while True:
            rows = self._run(functools.partial(self._scan_page, prefix=prefix, after=after))
            for row in rows:
                yield Row(*row)
            if len(rows) < _SCAN_PAGE_SIZE:
                return
            after = (rows[-1][0], rows[-1][1])

    @staticmethod
    def _scan_page(conn: _Connection, prefix: str, after: tuple[str, str]) -> list[Any]:
        hi = prefix_upper_bound(prefix) if prefix else _TOP
        params = {"ns": after[0], "key": after[1], "hi": hi, "limit": _SCAN_PAGE_SIZE}
        return _fetch_ranged(conn, sql=_SCAN_PAGE, params=params, prepare=True)

    def rows(
        self, namespace: str, now: float, *, key_prefix: str = "", limit: int = -1, offset: int = 0
    ) -> list[Row]:
        """As `StateBackend.rows`: one read of the live rows on the (namespace_md5, key) index."""
        params = {
            "ns": namespace,
            "lo": key_prefix,
            "hi": prefix_upper_bound(key_prefix) if key_prefix else None,
            "now": now,
            "limit": None if limit < 0 else limit,
            "offset": offset,
        }
        found = self._run(lambda conn: conn.execute(_ROWS, params).fetchall())
        return [Row(*row) for row in found]

    def count(
        self,
        prefix: str,
        now: float,
        *,
        exact: bool = False,
        key_prefix: str = "",
        cap: int | None = None,
    ) -> int:
        """As `StateBackend.count`: one counting range read, stopped at `cap`."""
        params: dict[str, Any] = {"now": now, "cap": cap}
        if exact:
            hi = prefix_upper_bound(key_prefix) if key_prefix else None
            params.update(ns=prefix, lo=key_prefix, hi=hi)
        else:
            params.update(lo=prefix, hi=prefix_upper_bound(prefix) if prefix else _TOP)

        def op(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(_COUNT_IN if exact else _COUNT_RANGE, params).fetchone()
            return int(row[0]) if row else 0

        return self._run(op)

    def counts(
        self, prefixes: list[str], now: float, *, exact: bool = False, cap: int | None = None
    ) -> list[int]:
        """As `StateBackend.counts`: every prefix counted in one statement (JIT off for it)."""
        if not prefixes:
            return []
        params = {
            "a": prefixes,
            "b": [None if exact else prefix_upper_bound(p) if p else _TOP for p in prefixes],
            "now": now,
            "cap": cap,
        }
        sql = _COUNT_EACH_IN if exact else _COUNT_EACH_RANGE

        def op(conn: _Connection) -> list[Any]:
            with conn.transaction():
                if not exact:
                    _no_jit(conn)
                return conn.execute(sql, params).fetchall()

        return [int(row[0]) for row in self._run(op)]

    def dag_counts(self, dag_ids: list[str], now: float, *, cap: int | None = None) -> list[int]:
        """As `StateBackend.dag_counts`: the count catalog's rows less the DAGs' expired rows
        not yet cleaned, in one statement. Its cost is that of the store's uncleaned expired
        rows; past `_EXPIRED_BOUND` of those, each DAG's range is counted instead."""
        if not dag_ids:
            return []
        params = {
            "dags": dag_ids,
            "now": now,
            "bound": _EXPIRED_BOUND + 1,
            "filled": _FILLS_DAG_KEYS,
        }
        found = self._run(lambda conn: conn.execute(_DAG_COUNTS, params).fetchall())
        if found[0][0] > _EXPIRED_BOUND:
            return super().dag_counts(dag_ids, now, cap=cap)
        return [int(n) if cap is None else min(int(n), cap) for _, n in found]

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
        params = {
            "lo": lo,
            "hi": prefix_upper_bound(lo) if lo else _TOP,
            "now": now,
            "n": len(prefix),
            "like": like,
            "limit": None if limit < 0 else limit,  # the skip scan stops there
        }
        found = self._run(functools.partial(_fetch_ranged, sql=_GROUPS[whole], params=params))
        return [row[0] for row in found]

    def count_expired(self, now: float) -> int:
        """As `StateBackend.count_expired`: one count over the expired rows."""

        def op(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(_COUNT_EXPIRED, (now,)).fetchone()
            return int(row[0]) if row else 0

        return self._run(op)

    def delete_expired(self, now: float, limit: int, stamp: Stamp | None = None) -> int:
        """As `HistoryBackend.delete_expired`: one DELETE, batched by `limit` when positive."""
        if limit <= 0:
            return self._deleting(_DELETE_EXPIRED_NAMED, {"now": now}, stamp)
        params = {"now": now, "limit": limit}
        return self._deleting(_DELETE_EXPIRED_BATCH_NAMED, params, stamp, prepare=True)

    def forget_writes(self, before: float, limit: int) -> int:
        """As `StateBackend.forget_writes`: one bounded DELETE through the `written_at` index."""
        return self._run(lambda conn: conn.execute(_FORGET_WRITES, (before, limit)).rowcount)

    # -- schema ---------------------------------------------------------------------------------

    def schema_status(self) -> SchemaStatus:
        """As `StateBackend.schema_status`: the recorded version, read outside the pool."""
        return SchemaStatus(self._direct(_current_version), len(MIGRATIONS))

    def migrate(self) -> list[int]:
        """As `StateBackend.migrate`: each step under the migration lock; indexes built online."""
        applied: list[int] = []
        # The schema may not exist yet, so this cannot go through the pool (whose first
        # connection checks it). Each step is one transaction (a retry is always safe), except
        # an online index build, which runs between them on its own and is idempotent.
        while True:
            done, online = self._direct(self._migrate_step)
            applied += done
            if online is None:
                return applied
            if online == _FILLS_DAG_KEYS:
                self._direct(_fill_dag_keys)
                if self._direct(functools.partial(_record_version, version=online)):
                    applied.append(online)
                continue
            build = functools.partial(
                _build_index, index=_ONLINE[online], sql=MIGRATIONS[online - 1]
            )
            self._direct(build)

    def _migrate_step(self, conn: psycopg.Connection[Any]) -> tuple[list[int], int | None]:
        """Under the migration lock (transaction-level: nothing outlives the transaction, so
        this works through PgBouncer's transaction pooling): apply and record pending versions
        up to the first online one whose index is not built yet, or the count catalog's step
        (applied here, recorded once its rows are counted). Returns the versions applied and
        that version (None: the schema is current)."""
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
                if version in _ONLINE:
                    if _index_state(conn, _ONLINE[version]) != _done(MIGRATIONS[version - 1]):
                        return applied, version
                elif version == _FILLS_DAG_KEYS:
                    conn.execute(MIGRATIONS[version - 1])
                    return applied, version
                else:
                    conn.execute(MIGRATIONS[version - 1])
                conn.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (%s)", (version,))
                applied.append(version)
        return applied, None

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


_INF = float("inf")


def _fetch_all(conn: psycopg.Connection[Any], *, sql: str, params: dict[str, Any]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def _no_jit(conn: psycopg.Connection[Any]) -> None:
    """JIT off for the statements of this transaction that read namespace ranges: the planner
    cannot tell that long namespaces are rare (it has no statistics on their length) and
    prices each read of `_live_long` (`_span`) at a share of the whole table, and it cannot
    see the ranges inside a range count's arrays (`counts`); either way past
    `jit_above_cost` from ~10 M rows: compiling took 25-100 ms of a discovery page that runs
    in 1 ms. SET LOCAL: nothing outlives the transaction (PgBouncer's transaction pooling)."""
    conn.execute("SET LOCAL jit = off")


def _fetch_ranged(
    conn: psycopg.Connection[Any], *, sql: str, params: dict[str, Any], prepare: bool = False
) -> list[Any]:
    """A read of namespace ranges (`_span`), in a transaction of its own without JIT."""
    with conn.transaction():
        _no_jit(conn)
        return conn.execute(sql, params, prepare=prepare).fetchall()


def _configure(conn: _Connection, mode: bool | None) -> None:
    """Each new pooled connection: server-side prepared statements (psycopg's default: the hot
    statements at once, any other on its fifth use) as `?prepare=` says, or where safe."""
    if mode if mode is not None else _prepares(conn):
        conn.prepare_threshold = _PSYCOPG_PREPARE_THRESHOLD


def _prepares(conn: psycopg.Connection[Any]) -> bool:
    """Whether statements prepared on `conn` will still be there in its next transaction: only
    when the session provably ends at PostgreSQL itself. The process id the server reports is
    the one libpq got at connection start; a pooler (PgBouncer, pgcat, Odyssey, RDS Proxy...)
    answers the start itself, with an id of its own, since it picks a server connection later,
    per transaction. NAT, port forwarding and TCP proxies keep them equal (the session is still
    one server process), so those keep the faster prepared statements."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is not None and row[0] == conn.info.backend_pid


def _release_pool(pool: ConnectionPool[Any], pid: int) -> None:
    if pid == os.getpid():
        pool.close()
    else:
        _INHERITED.append(pool)  # the parent's: closing it here would end its sessions


def _fill_dag_keys(conn: psycopg.Connection[Any]) -> None:
    """Count the rows already in the store into the count catalog, one DAG per transaction
    (`_FILL_ROWS`): writers creating or deleting keys of that DAG wait for its count, no one
    else waits. Idempotent: each DAG's rows become its count at that moment."""
    after = ""
    while True:
        lo = prefix_upper_bound(task_prefix(after)) if after else "t\x1f"
        params = {"lo": lo, "hi": "t ", "now": -_INF, "n": 2, "like": "", "limit": _FILL_BATCH}
        dags = [row[0] for row in _fetch_ranged(conn, sql=_GROUPS[False], params=params)]
        for dag in dags:
            prefix = task_prefix(dag)
            counted = {"dag": dag, "lo": prefix, "hi": prefix_upper_bound(prefix)}
            with conn.transaction():
                _no_jit(conn)
                conn.execute(_FILL_ROWS, counted)
                conn.execute(_FILL_LOCK, counted)
                conn.execute(_FILL_COUNT, counted)
        if len(dags) < _FILL_BATCH:
            return
        after = dags[-1]


def _record_version(conn: psycopg.Connection[Any], *, version: int) -> bool:
    """Record `version` as applied (under the migration lock); False if another did first."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        inserted = conn.execute(
            f"INSERT INTO {VERSION_TABLE} (version) VALUES (%s) ON CONFLICT DO NOTHING", (version,)
        )
        return inserted.rowcount == 1


def _index_state(conn: psycopg.Connection[Any], index: str) -> str:
    """ "valid", "absent", "building" (another session's CREATE INDEX CONCURRENTLY is running)
    or "invalid" (a build that died: its leftover must be dropped before building again)."""
    row = conn.execute(
        "SELECT i.indisvalid, EXISTS (SELECT FROM pg_stat_progress_create_index p "
        "WHERE p.index_relid = i.indexrelid) FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
        (index,),
    ).fetchone()
    if row is None:
        return "absent"
    return "valid" if row[0] else "building" if row[1] else "invalid"


def _done(sql: str) -> str:
    """The state of its index once an online step (`_ONLINE`) is done: built, or dropped."""
    return "absent" if sql.lstrip().upper().startswith("DROP") else "valid"


def _build_index(conn: psycopg.Connection[Any], *, index: str, sql: str) -> None:
    """Build (or drop) one index without blocking writers (autocommit: CONCURRENTLY cannot run
    in a transaction). Waits while another migrator builds it; drops a dead build's leftover."""
    if _done(sql) == "absent":
        conn.execute(sql)  # DROP INDEX CONCURRENTLY IF EXISTS: idempotent
        return
    while (state := _index_state(conn, index)) == "building":
        time.sleep(0.5)
    if state == "invalid":
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
    if state != "valid":
        conn.execute(sql)


def _deleted(cursor: psycopg.Cursor[Any], plain: bool) -> int:
    """How many rows a `_deletion` statement removed (a plain DELETE's count, or the count the
    recording statement selects)."""
    if plain:
        return cursor.rowcount
    row = cursor.fetchone()
    return int(row[0]) if row else 0


def _raise_if_recorded(conn: psycopg.Connection[Any], write_id: str, ns: str, key: str) -> None:
    """`WriteRecorded` when the ledger holds `write_id` (in the caller's transaction)."""
    found = conn.execute(_RECORDED, (write_id,), prepare=True).fetchone()
    if found is not None:
        raise recorded_outcome(write_id, found, ns, key)


def _record(
    conn: psycopg.Connection[Any],
    write_id: str,
    ns: str,
    key: str,
    etag: str | None,
    at: float,
    outcome: str | None = None,
) -> None:
    """Record `write_id` in the caller's transaction; taken meanwhile by a duplicate request
    (whose transaction committed first): start over, which then finds it recorded."""
    params = (write_id, ns, key, etag, at, outcome)
    if conn.execute(_RECORD, params, prepare=True).fetchone() is None:
        raise _StartOver


def _current_version(conn: psycopg.Connection[Any]) -> int | None:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,)).fetchone()
    if not (row and row[0]):
        return None
    version = conn.execute(_CURRENT_VERSION).fetchone()
    return None if version is None or version[0] is None else int(version[0])
