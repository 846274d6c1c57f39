"""The backend contract. Backends store JSON text by (namespace, key) and know nothing of Airflow.

A namespace is `TaskScope.namespace` / `AssetScope.namespace`; a task's map indices, runs and
DAG share namespace prefixes, which is all that listing, `clear --all-map-indices` and export
need. Expiry is an epoch-seconds float (None = never) that the backend stores and the store
interprets, so "an expired key reads as absent" is one rule in one place (`taskstate.store`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from taskstate.errors import BackendError, ConfigError, PreconditionFailedError
from taskstate.redaction import redact_url
from taskstate.scope import SEP, task_prefix

T = TypeVar("T")


class Entry(NamedTuple):
    """A stored value as the store sees it. `updated_by` is the writer, as compact JSON text
    (`{"kind": "task", ...}` / `{"kind": "api", "subject": ...}`), or None when unknown.

    `updated_at` comes back from `get` and `transact` (so `entry(key)` is one read); it is
    ignored in an entry handed to the backend to write, which stamps its own `now`. None from
    a backend that does not know it (the store then falls back to a scan of the scope)."""

    value: str
    expires_at: float | None
    updated_by: str | None = None
    updated_at: float | None = None


class Stamp(NamedTuple):
    """A write that history records (`taskstate.history`): the operation, when (epoch seconds)
    and by whom (compact JSON text or None). A backend write given a stamp appends a version of
    each key it changes in the same transaction, when the backend keeps history; without a
    stamp (taskstate's own markers, history off) it appends none."""

    op: str
    at: float
    by: str | None = None


class VersionRow(NamedTuple):
    """One kept version of a key; `value` None for a deletion (delete, clear, expire)."""

    version: int
    value: str | None
    expires_at: float | None
    updated_at: float
    updated_by: str | None
    op: str


class KeyVersion(NamedTuple):
    """A version of one key to import (`export --with-history`): the key and its version."""

    namespace: str
    key: str
    row: VersionRow


def imported_versions(
    versions: Sequence[KeyVersion],
    replace: bool,
    exists: Callable[[str, str], bool],
    mark: Callable[[str, str], int | None],
) -> Iterator[tuple[str, str, list[tuple[object, ...]], int]]:
    """What importing `versions` writes, key by key: (namespace, key, the versions' rows as
    inserted, the key's new mark). A key's versions are numbered after its high-water mark
    (`mark`: None when it was never written) — none shifted on a store that never saw the key,
    so a restored backup keeps its numbers, else enough that numbers keep growing and none is
    reused. With `replace=False` a key that `exists` keeps its history as it is."""
    found: dict[tuple[str, str], list[VersionRow]] = {}
    for item in versions:
        found.setdefault((item.namespace, item.key), []).append(item.row)
    for (namespace, key), kept in found.items():
        if not replace and exists(namespace, key):
            continue
        kept.sort(key=lambda row: row.version)
        high = mark(namespace, key)
        shift = 0 if high is None else max(0, high - kept[0].version + 1)
        rows: list[tuple[object, ...]] = [
            (namespace, key, v.version + shift, v.value, v.expires_at, v.updated_at,
             v.updated_by, v.op) for v in kept
        ]  # fmt: skip
        yield namespace, key, rows, kept[-1].version + shift


class Row(NamedTuple):
    """One stored row, as backends scan, bulk-write and clean up: the namespace and key it is
    filed under, the value's JSON text (or an offload reference), its expiry (None: never) and
    when and by whom it was last written."""

    # The fields' order is the SQL backends' upsert parameter order: a `Row` is bound as is.
    namespace: str
    key: str
    value: str
    expires_at: float | None
    updated_at: float
    updated_by: str | None = None


@dataclass(frozen=True)
class SchemaStatus:
    """The backend's schema version (`current`, None before the first migration) against the
    newest this taskstate knows (`latest`)."""

    current: int | None  # None: no schema yet
    latest: int

    @property
    def up_to_date(self) -> bool:
        """The schema is exactly the one this taskstate writes."""
        return self.current == self.latest

    @property
    def newer(self) -> bool:
        """Written by a newer taskstate (a rolling upgrade): usable, but not migratable here."""
        return self.current is not None and self.current > self.latest

    def describe(self) -> str:
        """The version, and what to do about it: the same advice `db check`, `doctor` and
        `db migrate` give."""
        if self.up_to_date:
            return f"schema version {self.current} (current)"
        if self.newer:
            return (
                f"schema version {self.current}, newer than this taskstate knows "
                f"({self.latest}); upgrade taskstate"
            )
        return (
            f"schema version {self.current or 'none'}, need {self.latest}; "
            "run `taskstate db migrate`"
        )


class WriteRecorded(Exception):
    """A write whose id the ledger already holds (`StateBackend.records_writes`): an earlier
    request with that id applied it, so this one applied nothing. `etag` is the ETag that
    write produced (None: it deleted the key); `value` the text an update operation wrote
    (`transact(keep_value=True)`; None for every other write). A client re-sends a write whose
    answer it lost with the same id; this is how the second request learns the first one's
    outcome."""

    def __init__(self, etag: str | None, value: str | None = None) -> None:
        super().__init__(etag)
        self.etag = etag
        self.value = value


def recorded_outcome(
    write_id: str, found: Sequence[str | None], namespace: str, key: str
) -> WriteRecorded:
    """The outcome a ledger row (namespace, key, etag, outcome) holds for a request re-sent with
    `write_id`; an id recorded for another key is refused (it names one write, never two)."""
    if (found[0], found[1]) != (namespace, key):
        raise PreconditionFailedError(
            f"write id {write_id!r} was already used for another key: a write id names one "
            "write; send a new one"
        )
    return WriteRecorded(found[2], found[3])


# What `transact` hands the callback, and what the callback returns: the entry to write,
# or None to leave the row as it is.
Transaction = Callable[[Entry | None], "tuple[Entry | None, T]"]


class StateBackend(ABC):
    """Storage for JSON text. Every write is atomic: it lands whole or not at all."""

    url: str

    @abstractmethod
    def get(self, namespace: str, key: str) -> Entry | None:
        """The stored entry of `key`, expired ones included (expiry is the store's rule)."""

    @abstractmethod
    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        """Insert or replace `key` atomically, stamping `updated_at = now` and the writer."""

    @abstractmethod
    def delete(self, namespace: str, key: str) -> None:
        """No-op when the key is absent."""

    def delete_if(self, namespace: str, key: str, version: Entry) -> bool:
        """Delete `key` only while its row is still `version` (as `get` returned it: value,
        expiry, writer and write time); True if it went. The HTTP API's DELETE with If-Match."""
        raise ConfigError(
            f"{type(self).__name__} cannot delete conditionally; serve from the database itself"
        )

    @abstractmethod
    def clear(self, namespace: str) -> int:
        """Delete every key of one namespace; returns how many rows went."""

    @abstractmethod
    def clear_prefix(self, prefix: str) -> int:
        """Delete every key of every namespace starting with `prefix`."""

    @abstractmethod
    def transact(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Entry | None], tuple[Entry | None, T]],
        now: float,
    ) -> T:
        """Atomic read-modify-write of one key.

        `fn` sees the current entry (expired ones included) and returns (entry to write or
        None to write nothing, result); the written entry's `updated_by` is stored with it.
        No other writer of that key runs in between; `fn` may be called more than once if the
        backend retries, so it must be pure.
        """

    @abstractmethod
    def scan(self, prefix: str = "") -> Iterator[Row]:
        """Every row whose namespace starts with `prefix`, ordered by (namespace, key)."""

    def set_many(self, rows: list[Row], *, replace: bool = True) -> int:
        """Write every row in one transaction: all land or none does (import). `replace=False`
        keeps rows that already exist. Returns how many rows were written.

        Optional for third-party backends: without it, `taskstate import` refuses to run."""
        raise BackendError(
            f"{type(self).__name__} cannot write many keys atomically (no set_many), so "
            "`taskstate import` cannot promise all or nothing; import into a built-in backend"
        )

    # -- history (taskstate.history) -------------------------------------------------------------
    # A backend that keeps history sets `keeps_history`; the store then hands its writes a
    # `Stamp` and sets `history_versions` (versions kept per key, 0 = off) from the settings.
    # Version numbers come from a per-key high-water mark that outlives the key and pruning (on
    # SQLite: the key's newest kept version, or its mark once pruning took every version).

    keeps_history: bool = False
    history_versions: int = 0
    # The write ledger (docs/api.md, "Write ids"): a backend that `records_writes` takes a
    # `write_id` in `transact` and `delete_if`. Before applying, it looks the id up (after
    # locking the key, so a duplicate racing the first waits for it) and raises `WriteRecorded`
    # when it is there; a write it applies is recorded in the same transaction, the id unique,
    # so two requests with one id never both apply. `forget_writes` prunes the ledger (`clean`).
    records_writes: bool = False

    def forget_writes(self, before: float, limit: int) -> int:
        """Delete up to `limit` ledger entries recorded before `before` (epoch seconds)."""
        return 0

    def may_be_recorded(self, write_id: str) -> bool:
        """Whether the ledger may hold `write_id`, read outside any transaction (a hint that
        lets a doomed conditional write fail before it locks the key; the write's own
        transaction decides). True when this backend cannot tell."""
        return True

    # A write locks the whole store (SQLite's file lock), so cleanup pauses between its batches
    # for the writers queued behind one.
    store_write_lock: bool = False

    def prune_versions(
        self, keep: int, before: float | None, limit: int, after: tuple[str, str] | None = None
    ) -> tuple[int, tuple[str, str] | None]:
        """One batch of `clean`'s pruning: of up to `limit` keys (0: all) after the cursor
        `after` (None: from the first), delete the versions beyond the newest `keep`, or written
        before `before` (except the newest version of a key that has a row), keeping each
        key's number in its mark first. Returns how many versions went and the cursor of the
        next batch (None: the walk is done)."""
        return 0, None

    def version_refs(self) -> Iterator[str]:
        """The stored text of each kept version that may hold an offload reference (its object
        stays while the version does)."""
        return iter(())

    # -- listings and discovery ----------------------------------------------------------------
    # The built-in backends answer each with indexed SQL (one statement; `groups` a recursive
    # skip over the namespace index, one seek per distinct field). These defaults, built on
    # `scan`, keep third-party backends working at the cost of reading every row under the
    # prefix. "Live" is `taskstate.stored.is_live`: expires_at None or after `now`.

    def rows(
        self, namespace: str, now: float, *, key_prefix: str = "", limit: int = -1, offset: int = 0
    ) -> list[Row]:
        """Live rows of exactly `namespace` whose key starts with `key_prefix`, in key order:
        `limit` of them (-1: all) from `offset`."""
        found = (
            row
            for row in self.scan(namespace)
            if row.namespace == namespace and row.key.startswith(key_prefix) and _live(row, now)
        )
        return list(itertools.islice(found, offset, None if limit < 0 else offset + limit))

    def count(
        self,
        prefix: str,
        now: float,
        *,
        exact: bool = False,
        key_prefix: str = "",
        cap: int | None = None,
    ) -> int:
        """How many live rows the namespaces starting with `prefix` hold (`exact`: namespace
        `prefix` only, keys starting with `key_prefix`); counting stops at `cap`."""
        found = (
            row
            for row in self.scan(prefix)
            if (not exact or row.namespace == prefix)
            and row.key.startswith(key_prefix)
            and _live(row, now)
        )
        return sum(1 for _ in itertools.islice(found, cap))

    def counts(
        self, prefixes: list[str], now: float, *, exact: bool = False, cap: int | None = None
    ) -> list[int]:
        """`count` of each of `prefixes`, in order (a backend with round trips: in one)."""
        return [self.count(prefix, now, exact=exact, cap=cap) for prefix in prefixes]

    def dag_counts(self, dag_ids: list[str], now: float, *, cap: int | None = None) -> list[int]:
        """How many live keys each of `dag_ids` holds under its task namespaces (`count` of
        each one's `task_prefix`), in order. A backend that keeps a count catalog reads it."""
        return self.counts([task_prefix(dag_id) for dag_id in dag_ids], now, cap=cap)

    def live_dags(
        self, now: float, limit: int, *, cap: int | None = None
    ) -> list[tuple[str, int]] | None:
        """The first `limit` DAG ids (-1: all) holding live task state, ascending, with their
        `dag_counts`, read from a count catalog in one go; None where that is not cheap (no
        catalog, or too many expired rows not yet cleaned): then `groups` finds them."""
        return None

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
        """The distinct fields that follow `prefix` in namespaces holding live rows, ascending:
        the text up to the next field separator, or (`whole`) the rest of the namespace. Only
        fields starting with `start`, and (when given) matching the SQL LIKE pattern `like`
        (escape character `\\`); the first `limit` of them (-1: all)."""
        match = like_matcher(like) if like else None
        found: list[str] = []
        for row in self.scan(prefix + start):
            if not _live(row, now):
                continue
            field = group_of(row.namespace, len(prefix), whole)
            if (not found or found[-1] != field) and (match is None or match(field)):
                found.append(field)
        return sorted(set(found))[: None if limit < 0 else limit]

    @abstractmethod
    def count_expired(self, now: float) -> int:
        """How many rows have `expires_at <= now` (what cleanup would delete)."""

    @abstractmethod
    def delete_expired(self, now: float, limit: int) -> int:
        """Delete up to `limit` rows with expires_at <= now (0 = all, one statement)."""

    @abstractmethod
    def schema_status(self) -> SchemaStatus:
        """The schema version in the database and the one this code needs."""

    @abstractmethod
    def migrate(self) -> list[int]:
        """Apply pending forward-only migrations; returns the versions applied."""

    def close(self) -> None:
        """Release connections. The backend may be used again afterwards (it reconnects)."""

    def describe(self) -> str:
        """Where the state lives, safe to print (no password)."""
        return redact_url(self.url)

    # Async twins: thread offload keeps one implementation of each operation. A backend with
    # a native async driver may override them.
    async def aget(self, namespace: str, key: str) -> Entry | None:
        """`get` in a worker thread (a native async backend may override it)."""
        return await asyncio.to_thread(self.get, namespace, key)

    async def aset(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        """`set` in a worker thread (a native async backend may override it)."""
        await asyncio.to_thread(self.set, namespace, key, value, expires_at, now, updated_by)

    async def adelete(self, namespace: str, key: str) -> None:
        """`delete` in a worker thread (a native async backend may override it)."""
        await asyncio.to_thread(self.delete, namespace, key)

    async def aclear(self, namespace: str) -> int:
        """`clear` in a worker thread (a native async backend may override it)."""
        return await asyncio.to_thread(self.clear, namespace)


class HistoryBackend(StateBackend):
    """A backend that keeps history: each write method takes an optional `Stamp` and, given
    one (and `history_versions` > 0), appends a version of every key it changes in the same
    transaction. The store hands stamps only to a backend with `keeps_history`."""

    keeps_history = True

    @abstractmethod
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
        """As `StateBackend.set`; given a stamp, also appends the key's new version."""

    @abstractmethod
    def delete(self, namespace: str, key: str, stamp: Stamp | None = None) -> None:
        """As `StateBackend.delete`; given a stamp, also records the deletion as a version."""

    @abstractmethod
    def delete_if(
        self,
        namespace: str,
        key: str,
        version: Entry,
        stamp: Stamp | None = None,
        write_id: str | None = None,
    ) -> bool:
        """As `StateBackend.delete_if`; given a stamp, also records the deletion; given a
        `write_id`, it is looked up and recorded (`records_writes`)."""

    @abstractmethod
    def clear(self, namespace: str, stamp: Stamp | None = None) -> int:
        """As `StateBackend.clear`; given a stamp, also records each key's deletion."""

    @abstractmethod
    def clear_prefix(self, prefix: str, stamp: Stamp | None = None) -> int:
        """As `StateBackend.clear_prefix`; given a stamp, also records each key's deletion."""

    @abstractmethod
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
        """As `StateBackend.transact`; given a stamp, a write it makes also appends a version;
        given a `write_id`, it is looked up and recorded (`records_writes`), with the value
        written when `keep_value` (an update operation's outcome, `WriteRecorded.value`)."""

    @abstractmethod
    def set_many(
        self,
        rows: list[Row],
        *,
        replace: bool = True,
        stamp: Stamp | None = None,
        versions: Sequence[KeyVersion] = (),
    ) -> int:
        """`StateBackend.set_many`; with a stamp, also `versions` (an export's history) in the
        same transaction, before the rows' own versions (`imported_versions`), each key's mark
        raised and its versions trimmed to `history_versions`."""

    @abstractmethod
    def delete_expired(self, now: float, limit: int, stamp: Stamp | None = None) -> int:
        """As `StateBackend.delete_expired`; given a stamp, also records each expiry."""

    @abstractmethod
    def versions(
        self, namespace: str, key: str, *, limit: int, at: float | None = None
    ) -> list[VersionRow]:
        """Kept versions of `key`, newest first, at most `limit`; `at`: only those written at
        or before that instant."""

    @abstractmethod
    def version(self, namespace: str, key: str, version: int) -> VersionRow | None:
        """One kept version of `key`, or None."""

    @abstractmethod
    def first_version(self, namespace: str, key: str) -> int | None:
        """The number of the oldest kept version of `key` (None: none kept)."""

    @abstractmethod
    def task_versions(self, prefix: str, at: float) -> list[tuple[str, str, VersionRow | None]]:
        """(namespace, key, the version current at `at` or None) of every key under `prefix`
        that has a kept version or a row (`restore_task`)."""

    @abstractmethod
    def version_keys(self, prefix: str) -> list[tuple[str, str]]:
        """(namespace, key) of every key under `prefix` ever written with history on (its mark),
        in order (`export --with-history`)."""

    @abstractmethod
    def restore_many(self, writes: list[Row], deletes: list[tuple[str, str]], stamp: Stamp) -> None:
        """Write `writes` and delete `deletes` in one transaction, each a version
        (`restore_task`)."""


# A count catalog's read (`dag_counts`) subtracts the DAGs' expired rows not yet cleaned, found
# among the store's; past this many of those it counts each DAG's range instead.
DAG_COUNTS_EXPIRED_BOUND = 2_000


def prefix_upper_bound(prefix: str) -> str:
    """The smallest string greater than every string that starts with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def prefix_bounds(prefix: str) -> dict[str, str]:
    """`lo` and `hi` of the namespaces under `prefix` ("": all of them)."""
    return {"lo": prefix, "hi": prefix_upper_bound(prefix) if prefix else "\U0010ffff"}


def _live(row: Row, now: float) -> bool:
    return row.expires_at is None or row.expires_at > now


def group_of(namespace: str, skip: int, whole: bool) -> str:
    """The field of `namespace` that starts at `skip` (`groups`)."""
    rest = namespace[skip:]
    return rest if whole else rest.partition(SEP)[0]


def like_matcher(pattern: str) -> Callable[[str], bool]:
    """SQL LIKE (`%`, `_`, escape `\\`, case-sensitive) as a Python predicate."""
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            parts.append(re.escape(next(chars, "\\")))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    regex = re.compile("".join(parts), re.DOTALL)
    return lambda text: regex.fullmatch(text) is not None


class WorkerStateBackend(ABC):
    """A worker-side backend (`[workers] state_store_backend`): keeps the value somewhere else
    and hands the database only a reference, as Airflow 3.3's worker backends do.

    The store uploads before the row is written and never inside a database transaction. Give
    every call of `serialize_to_ref` a new reference: then an object belongs to exactly one row
    version, and the store can remove it as soon as that row is deleted or superseded.
    """

    #: Values of at most this many bytes of JSON stay inline; None offloads every value.
    threshold: int | None = None

    @abstractmethod
    def serialize_to_ref(self, namespace: str, key: str, value: str) -> str:
        """Store `value` (JSON text) and return a new reference to keep in the database."""

    @abstractmethod
    def deserialize_from_ref(self, ref: str) -> str:
        """Return the JSON text behind a reference from `serialize_to_ref`."""

    @abstractmethod
    def discard(self, refs: list[str]) -> None:
        """Remove these objects: no committed row references them. Missing ones are fine."""

    def committed(self, namespace: str, key: str, ref: str) -> None:
        """The row holding `ref` is committed (after `set`): a chance to drop older objects."""

    def sweep_orphans(self, live: LiveRefs, *, dry_run: bool = False) -> int:
        """`StateStore.cleanup`: remove objects that no live row references (past a grace
        period for writes in flight); returns how many (a dry run: would remove). List the
        objects a batch at a time and ask `live.among(batch)` which of them are referenced,
        so memory is bounded by the batch, not by the number of rows or objects.

        Default: a backend written for the older interface, `sweep(live_refs)`, gets every
        live reference in one set (memory grows with them; a DeprecationWarning says so);
        a backend with neither has nothing to sweep."""
        if type(self).sweep is WorkerStateBackend.sweep:
            return 0
        warnings.warn(
            f"{type(self).__name__}.sweep(live_refs) holds every live reference in memory; "
            "implement sweep_orphans(live, dry_run=...) instead (see WorkerStateBackend)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.sweep(set(live), dry_run=dry_run)

    def sweep(self, live_refs: set[str], *, dry_run: bool = False) -> int:
        """Deprecated (the set grows with the store): implement `sweep_orphans`. Still called,
        with every live reference, for a third-party backend that only overrides this."""
        return 0


class LiveRefs(Protocol):
    """The offload references live rows hold, as `StateStore.cleanup` hands them to
    `WorkerStateBackend.sweep_orphans`."""

    def among(self, refs: Sequence[str]) -> set[str]:
        """Which of `refs` a live row references."""
        ...

    def __iter__(self) -> Iterator[str]:
        """Every live reference, streamed (for `sweep(live_refs)` backends)."""
        ...
