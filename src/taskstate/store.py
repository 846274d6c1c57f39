"""`StateStore` (backend + settings + clock), the two accessors a task uses, and every
operation on stored state: the CLI, the HTTP API, the UI, transfer and the Airflow code are its
clients and never reach a backend themselves.

The accessors hold everything a call needs (namespace, backend, limits, the writer's identity)
so get/set do no lookups beyond validating the input and one backend call.

A write has one path: encode the value (pure: key, JSON and size rules), offload it when a
worker backend is configured (object-store I/O, never inside a database transaction), then one
backend write. Atomic updates run the pure part inside the backend's transaction; with
offloading they compute and upload outside it and commit only if the row is still the one they
read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import groupby
from typing import Any, Final, Generic, TypeVar

from taskstate.backends import load_worker_backend, open_backend
from taskstate.backends.base import Entry, Row, SchemaStatus, StateBackend, WorkerStateBackend
from taskstate.cleanup import CleanupResult, delete_expired
from taskstate.errors import (
    BackendError,
    KeyNotFoundError,
    OffloadedValueMissingError,
    PreconditionFailedError,
)
from taskstate.scope import META_PREFIX, AssetScope, TaskScope, parse_namespace, task_prefix
from taskstate.settings import Settings
from taskstate.values import (
    JsonValue,
    check_key,
    check_size,
    decode_value,
    encode_value,
    expires_at,
)

T = TypeVar("T")

# An offloaded value's row holds REF_PREFIX + reference. Encoded JSON never starts with "@",
# so no user value can pass for a reference. (Before schema 2 a reference was a JSON object
# that a user value could mimic; schema migration 2 rewrites those rows.)
REF_PREFIX: Final = "@taskstate-ref:"


GONE: Final = object()  # `_read`: the row was deleted while its value was being read


class _Expiry:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


DEFAULT_EXPIRY: Final = _Expiry("DEFAULT_EXPIRY")
"""`write(expires_at=DEFAULT_EXPIRY)`: `[state_store] default_retention_days` from now."""
KEEP_EXPIRY: Final = _Expiry("KEEP_EXPIRY")
"""`write(expires_at=KEEP_EXPIRY)`: the key's current expiry (the default for a new key)."""

Writer = dict[str, Any]
"""Who wrote a key: `{"kind": "task", "dag_id", "run_id", "task_id", "map_index"}` or
`{"kind": "api", "subject": ...}` — the HTTP API's `last_updated_by`."""


def task_writer(scope: TaskScope) -> Writer:
    """The writer identity of a task instance (what its own writes record)."""
    return {
        "kind": "task",
        "dag_id": scope.dag_id,
        "run_id": scope.run_id,
        "task_id": scope.task_id,
        "map_index": scope.map_index,
    }


def stored_ref(text: str) -> str | None:
    """The offload reference a stored value holds, or None for an inline value."""
    return text[len(REF_PREFIX) :] if text.startswith(REF_PREFIX) else None


def etag_of(text: str) -> str:
    """An opaque version tag of a stored value: it changes whenever the value does."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _writer_text(writer: Writer | None) -> str | None:
    return None if writer is None else json.dumps(writer, separators=(",", ":"), sort_keys=True)


def _is_live(expires: float | None, now: float) -> bool:
    """The expiry rule, in its one place: a key is absent from the moment it expires."""
    return expires is None or expires > now


@dataclass(frozen=True)
class StoredEntry:
    """A live key with what the API and UI show beside its value."""

    key: str
    value: Any
    updated_at: float
    expires_at: float | None
    updated_by: Writer | None
    etag: str


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int


class StateStore:
    """Entry point: `StateStore()` uses the configured backend; `StateStore(url)` opens one.

    >>> store = StateStore("sqlite:///" + str(tmp / "doc.db"))
    >>> state = store.task_state(TaskScope("etl", "run_1", "load"))
    >>> state.set("cursor", 7)
    >>> state.get("cursor"), state.get("absent", "default")
    (7, 'default')
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        backend: StateBackend | None = None,
        worker_backend: WorkerStateBackend | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings if settings is not None else Settings.load()
        self.backend = backend if backend is not None else open_backend(url, self.settings)
        self.worker_backend = (
            worker_backend if worker_backend is not None else load_worker_backend(self.settings)
        )
        self.clock = clock

    def task_state(self, scope: TaskScope, *, writer: Writer | None = None) -> TaskStateStore:
        """The state of one task instance. Writes record `writer` (default: the task itself)."""
        return TaskStateStore(self, scope, writer)

    def asset_state(self, scope: AssetScope, *, writer: Writer | None = None) -> AssetStateStore:
        """The state of one asset. Writes record `writer` (default: unknown)."""
        return AssetStateStore(self, scope, writer)

    def meta(self, scope: TaskScope) -> MetaState:
        """taskstate's own markers for a task instance (re-run and re-expansion detection)."""
        return MetaState(self, scope)

    # -- reading ------------------------------------------------------------------------------

    def load_value(self, text: str) -> Any:
        """Decode stored text, following an offload reference."""
        ref = stored_ref(text)
        if ref is None:
            return decode_value(text)
        if self.worker_backend is None:
            raise BackendError(
                "this value was offloaded to object storage, but no [workers] "
                "state_store_backend is configured here; configure the same offloading as the "
                "writers"
            )
        return decode_value(self.worker_backend.deserialize_from_ref(ref))

    def live_rows(self, prefix: str = "") -> Iterator[Row]:
        """Every live row of user state under a namespace prefix, in (namespace, key) order."""
        now = self.clock()
        for row in self.backend.scan(prefix):
            if _is_live(row.expires_at, now) and not row.namespace.startswith(META_PREFIX):
                yield row

    def _read(self, namespace: str, key: str, text: str) -> Any:
        """Decode a row's value. Its offloaded object may vanish between reading the row and
        reading the object when a concurrent delete or set supersedes the row: then read the row
        again (GONE once it no longer exists). A row that still names a missing object is an
        error."""
        while True:
            try:
                return self.load_value(text)
            except OffloadedValueMissingError:
                entry = self.backend.get(namespace, key)
                if entry is None or not _is_live(entry.expires_at, self.clock()):
                    return GONE
                if entry.value == text:
                    raise
                text = entry.value

    def entry_of(self, row: Row) -> StoredEntry | None:
        """A row as the API shows it; None if it was deleted while being read."""
        value = self._read(row.namespace, row.key, row.value)
        if value is GONE:
            return None
        updated_by = None if row.updated_by is None else json.loads(row.updated_by)
        return StoredEntry(
            row.key, value, row.updated_at, row.expires_at, updated_by, etag_of(row.value)
        )

    def entries(self, prefix: str = "") -> Iterator[tuple[TaskScope | AssetScope, StoredEntry]]:
        """Every live key under a namespace prefix with its scope, decoded, in order."""
        for row in self.live_rows(prefix):
            if (entry := self.entry_of(row)) is not None:
                yield parse_namespace(row.namespace), entry

    def scopes(self, prefix: str = "") -> Iterator[tuple[TaskScope | AssetScope, int]]:
        """Each scope under `prefix` that holds live state, with its number of keys."""
        for namespace, rows in groupby(self.live_rows(prefix), key=lambda row: row.namespace):
            yield parse_namespace(namespace), sum(1 for _ in rows)

    # -- maintenance --------------------------------------------------------------------------

    def clear_task(
        self, dag_id: str, run_id: str, task_id: str, *, map_index: int | None = None
    ) -> int:
        """Delete a task instance's state (`map_index=None`: every map index): its rows, their
        offloaded objects and taskstate's markers. Returns how many keys went."""
        if map_index is None:
            prefix = task_prefix(dag_id, run_id, task_id)
            refs = self._refs(prefix)
            count = self.backend.clear_prefix(prefix)
            self.backend.clear_prefix(TaskScope(dag_id, run_id, task_id).meta_namespace[:-2])
        else:
            scope = TaskScope(dag_id, run_id, task_id, map_index)
            refs = self._refs(scope.namespace, exact=True)
            count = self.backend.clear(scope.namespace)
            self.backend.clear(scope.meta_namespace)
        self._discard(refs)
        return count

    def restore(
        self,
        scope: TaskScope | AssetScope,
        key: str,
        value: object,
        expires: float | None,
        *,
        writer: Writer | None = None,
    ) -> None:
        """Write with an absolute expiry (import, migration); the same rules as `set`.
        Asset state never expires, whatever `expires` says."""
        accessor = self._accessor(scope, writer)
        accessor.write(key, value, expires_at=expires)

    def import_entries(
        self,
        entries: Iterable[tuple[TaskScope | AssetScope, str, object, float | None]],
        *,
        replace: bool = True,
    ) -> int:
        """Write many keys all or nothing: every value is checked and offloaded first, then one
        backend transaction writes them all. `replace=False` keeps keys that already exist.
        Returns how many rows were written."""
        now = self.clock()
        rows: list[Row] = []
        uploaded: list[str] = []
        try:
            for scope, key, value, expires in entries:
                accessor = self._accessor(scope, None)
                text = accessor._offload(key, accessor._encode(key, value), uploaded)
                expiry = expires if isinstance(scope, TaskScope) else None
                rows.append(Row(scope.namespace, key, text, expiry, now, accessor._writer))
            return self.backend.set_many(rows, replace=replace)
        except BaseException:
            self._discard(uploaded)
            raise

    def cleanup(
        self,
        *,
        batch_size: int | None = None,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> CleanupResult:
        """Delete expired task state in bounded batches, then sweep offloaded objects no row
        references any more (past the worker backend's grace period)."""
        size = self.settings.state_cleanup_batch_size if batch_size is None else batch_size
        result = delete_expired(
            self.backend, self.clock(), batch_size=size, dry_run=dry_run, on_batch=on_batch
        )
        worker = self.worker_backend
        if worker is None:
            return result
        # An expired row reads as absent, so its object is an orphan even before (dry run)
        # or after (a key expiring meanwhile) the row itself goes.
        now = self.clock()
        live = {
            ref
            for row in self.backend.scan()
            if _is_live(row.expires_at, now) and (ref := stored_ref(row.value)) is not None
        }
        return result.with_orphans(worker.sweep(live, dry_run=dry_run))

    def schema_status(self) -> SchemaStatus:
        return self.backend.schema_status()

    def migrate(self) -> list[int]:
        """Bring the backend's schema up to date; returns the versions applied."""
        return self.backend.migrate()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateStore({self.backend.describe()!r})"

    # -- offloaded objects --------------------------------------------------------------------

    def _refs(self, prefix: str, *, exact: bool = False) -> list[str]:
        """References held by the rows under `prefix`, read before those rows are deleted."""
        if self.worker_backend is None:
            return []
        return [
            ref
            for row in self.backend.scan(prefix)
            if (not exact or row.namespace == prefix) and (ref := stored_ref(row.value))
        ]

    def _discard(self, refs: list[str]) -> None:
        """Remove objects that no committed row references (references are unique per write,
        so a deleted or superseded row's object is nobody else's)."""
        if refs and self.worker_backend is not None:
            self.worker_backend.discard(refs)

    def _accessor(self, scope: TaskScope | AssetScope, writer: Writer | None) -> _Accessor:
        if isinstance(scope, TaskScope):
            return self.task_state(scope, writer=writer)
        return self.asset_state(scope, writer=writer)


class _Accessor:
    """What task and asset state share; subclasses differ in expiry and default writer."""

    def __init__(
        self, store: StateStore, scope: TaskScope | AssetScope, writer: Writer | None = None
    ) -> None:
        self.scope = scope
        self._store = store
        self._ns = scope.namespace
        self._backend = store.backend
        self._worker = store.worker_backend
        self._clock = store.clock
        self._limit = store.settings.max_value_storage_bytes
        self._default_days = store.settings.default_retention_days
        self._read = store._read
        self._writer = _writer_text(writer)

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` when it is absent or expired."""
        check_key(key)
        entry = self._backend.get(self._ns, key)
        if entry is None or not _is_live(entry.expires_at, self._clock()):
            return default
        value = self._read(self._ns, key, entry.value)
        return default if value is GONE else value

    def keys(self) -> list[str]:
        """The live keys of this scope, ascending."""
        return [row.key for row in self._rows()]

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) of every live key of this scope, ascending by key."""
        values = ((row.key, self._read(self._ns, row.key, row.value)) for row in self._rows())
        return [(key, value) for key, value in values if value is not GONE]

    def entry(self, key: str) -> StoredEntry | None:
        """`key` with its metadata (updated at/by, expiry, etag), or None if absent or expired."""
        check_key(key)
        # A scope holds few keys; the scan brings updated_at and the writer along.
        return next((self._store.entry_of(r) for r in self._rows() if r.key == key), None)

    def page(self, *, limit: int = 50, offset: int = 0, key_prefix: str = "") -> Page[StoredEntry]:
        """Live keys in ascending order, `limit` from `offset`, optionally under `key_prefix`;
        `total` counts every match."""
        rows = [row for row in self._rows() if row.key.startswith(key_prefix)]
        window = rows[offset : offset + limit] if limit >= 0 else []
        entries = (self._store.entry_of(row) for row in window)
        return Page([entry for entry in entries if entry is not None], len(rows))

    def _rows(self) -> Iterator[Row]:
        # A prefix scan of "…\x1f1" also matches map index 10: keep this namespace only.
        return (row for row in self._store.live_rows(self._ns) if row.namespace == self._ns)

    # -- writing --------------------------------------------------------------------------

    def _encode(self, key: str, value: object) -> str:
        """The pure half of a write: key and value rules; the size rule unless offloaded."""
        check_key(key)
        text = encode_value(value)
        if not self._offloads(text):
            check_size(text, self._limit, key, offload_configured=self._worker is not None)
        return text

    def _offloads(self, text: str) -> bool:
        worker = self._worker
        return worker is not None and (
            worker.threshold is None or len(text.encode("utf-8")) > worker.threshold
        )

    def _offload(self, key: str, text: str, uploaded: list[str]) -> str:
        """The I/O half: put the value in object storage when configured; the row's text."""
        if self._worker is None or not self._offloads(text):
            return text
        ref = self._worker.serialize_to_ref(self._ns, key, text)
        uploaded.append(ref)
        stored = REF_PREFIX + ref
        check_size(stored, self._limit, key, offload_configured=True)
        return stored

    def _set(self, key: str, value: object, retention: object) -> None:
        uploaded: list[str] = []
        text = self._offload(key, self._encode(key, value), uploaded)
        now = self._clock()
        try:
            self._backend.set(self._ns, key, text, self._expiry(retention, now), now, self._writer)
        except BaseException:
            self._store._discard(uploaded)
            raise
        if uploaded and self._worker is not None:
            self._worker.committed(self._ns, key, uploaded[0])

    def _expiry(self, retention: object, now: float) -> float | None:
        return expires_at(retention, self._default_days, now)

    def write(
        self,
        key: str,
        value: object,
        *,
        expires_at: float | _Expiry | None = DEFAULT_EXPIRY,
        if_match: str | None = None,
        if_none_match: bool = False,
        must_exist: bool = False,
    ) -> StoredEntry:
        """Write with an absolute expiry and optional preconditions (the HTTP API's PUT/PATCH).

        `expires_at`: epoch seconds, None (never), DEFAULT_EXPIRY or KEEP_EXPIRY (ignored for
        assets, which never expire). `if_match`: only if the key's etag is this;
        `if_none_match`: only if the key is absent; `must_exist`: only if present. A failed
        precondition raises `PreconditionFailedError` / `KeyNotFoundError` and writes nothing.
        """
        uploaded: list[str] = []
        text = self._offload(key, self._encode(key, value), uploaded)
        now = self._clock()

        def expiry(current: Entry | None) -> float | None:
            if expires_at is KEEP_EXPIRY and current is not None:
                return self._absolute(current.expires_at, now)
            if isinstance(expires_at, _Expiry):
                return self._expiry(None, now)
            return self._absolute(expires_at, now)

        def step(entry: Entry | None) -> tuple[Entry, float | None]:
            live = entry if entry is not None and _is_live(entry.expires_at, now) else None
            if must_exist and live is None:
                raise KeyNotFoundError(f"no key {key!r} in {self.scope}")
            if if_none_match and live is not None:
                raise PreconditionFailedError(f"{key!r} already exists in {self.scope}")
            if if_match is not None and (live is None or etag_of(live.value) != if_match):
                raise PreconditionFailedError(
                    f"{key!r} in {self.scope} changed since it was read (etag {if_match!r} no "
                    "longer matches); read it again"
                )
            new = expiry(live)
            return Entry(text, new, self._writer), new

        try:
            if (
                if_match is None
                and not if_none_match
                and not must_exist
                and (expires_at is not KEEP_EXPIRY)
            ):
                written = expiry(None)
                self._backend.set(self._ns, key, text, written, now, self._writer)
            else:
                written = self._backend.transact(self._ns, key, step, now)
        except BaseException:
            self._store._discard(uploaded)
            raise
        updated_by = None if self._writer is None else json.loads(self._writer)
        return StoredEntry(key, value, now, written, updated_by, etag_of(text))

    def _absolute(self, expires: float | None, now: float) -> float | None:
        return expires

    def delete(self, key: str) -> None:
        """Remove `key`; a no-op when it is absent."""
        check_key(key)
        old = self._backend.get(self._ns, key) if self._worker is not None else None
        self._backend.delete(self._ns, key)
        if old is not None and (ref := stored_ref(old.value)):
            self._store._discard([ref])

    def clear(self) -> None:
        """Remove every key of this scope (a mapped task: this map index only)."""
        refs = self._store._refs(self._ns, exact=True)
        self._backend.clear(self._ns)
        self._store._discard(refs)

    def _update(self, key: str, fn: Callable[[Any], Any], default: Any, retention: object) -> Any:
        check_key(key)

        def decide(present: bool, current: Any) -> tuple[str, Any]:
            new = fn(current if present else default)
            return self._encode(key, new), new

        return self._atomic(key, decide, retention)

    def _compare_and_set(self, key: str, expected: Any, new: Any, retention: object) -> bool:
        # `expected` obeys the value rules too: a tuple is refused, not taken for a list.
        want = None if expected is None else _canonical(encode_value(expected))
        text = self._encode(key, new)

        def decide(present: bool, current: Any) -> tuple[str | None, bool]:
            have = _canonical(encode_value(current)) if present else None
            return (text, True) if have == want else (None, False)

        return self._atomic(key, decide, retention)

    def _atomic(
        self, key: str, decide: Callable[[bool, Any], tuple[str | None, T]], retention: object
    ) -> T:
        """Read-modify-write of one key. `decide(present, current)` returns the encoded new
        value (None: write nothing) and the result. Without offloading it runs inside the
        backend's transaction; with it, the upload happens outside and the write commits only
        if the row is still the one that was read (else everything runs again)."""
        if self._worker is None:

            def step(entry: Entry | None) -> tuple[Entry | None, T]:
                now = self._clock()
                live = entry is not None and _is_live(entry.expires_at, now)
                text, result = decide(
                    live, self._store.load_value(entry.value) if live and entry else None
                )
                if text is None:
                    return None, result
                return Entry(text, self._expiry(retention, now), self._writer), result

            return self._backend.transact(self._ns, key, step, self._clock())
        while True:
            seen = self._backend.get(self._ns, key)
            now = self._clock()
            current = GONE
            if seen is not None and _is_live(seen.expires_at, now):
                current = self._read(self._ns, key, seen.value)
            text, result = decide(current is not GONE, None if current is GONE else current)
            if text is None:
                return result
            uploaded: list[str] = []
            stored = self._offload(key, text, uploaded)
            entry = Entry(stored, self._expiry(retention, now), self._writer)
            if self._commit_if_unchanged(key, seen, entry, uploaded):
                return result

    def _commit_if_unchanged(
        self, key: str, seen: Entry | None, entry: Entry, uploaded: list[str]
    ) -> bool:
        def step(current: Entry | None) -> tuple[Entry | None, bool]:
            return (entry, True) if current == seen else (None, False)

        try:
            done = self._backend.transact(self._ns, key, step, self._clock())
        except BaseException:
            self._store._discard(uploaded)
            raise
        if not done:
            self._store._discard(uploaded)
        elif seen is not None and (old := stored_ref(seen.value)):
            self._store._discard([old])
        return done

    # -- async twins ----------------------------------------------------------------------

    async def aget(self, key: str, default: Any = None) -> Any:
        return await asyncio.to_thread(self.get, key, default)

    async def adelete(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.scope!r}>"


def _canonical(text: str) -> str:
    """Equality as JSON sees it: key order ignored, `True` != `1`, `1.0` != `1`."""
    return json.dumps(decode_value(text), sort_keys=True, separators=(",", ":"))


class TaskStateStore(_Accessor):
    """Key/value state of one task instance, shared by all of its tries.

    `retention`: None → `[state_store] default_retention_days` (0 = never), a `timedelta`,
    or `NEVER_EXPIRE`. An expired key reads as absent.
    """

    scope: TaskScope

    def __init__(self, store: StateStore, scope: TaskScope, writer: Writer | None = None) -> None:
        super().__init__(store, scope, task_writer(scope) if writer is None else writer)

    def set(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None:
        """Store `value` (JSON, within the size limit) under `key`, replacing any value.

        Nothing is written when a rule refuses the value; the error names what to change.
        """
        self._set(key, value, retention)

    def update(
        self,
        key: str,
        fn: Callable[[Any], JsonValue],
        *,
        default: Any = None,
        retention: timedelta | None = None,
    ) -> Any:
        """Atomically replace the value with `fn(current or default)`; returns the new value.

        Concurrent updaters of the same key (other threads, processes, machines) never lose
        an update. `fn` may run more than once, so keep it free of side effects.
        """
        return self._update(key, fn, default, retention)

    def compare_and_set(
        self,
        key: str,
        expected: JsonValue | None,
        new: JsonValue,
        *,
        retention: timedelta | None = None,
    ) -> bool:
        """Write `new` only if the current value equals `expected` (None = key absent).

        `expected` follows the value rules (a tuple is refused, not taken for a list)."""
        return self._compare_and_set(key, expected, new, retention)

    def clear(self, *, all_map_indices: bool = False) -> None:
        """Remove every key of this task instance; `all_map_indices=True`: of every map index
        of the task in this run (as Airflow's `clear(all_map_indices=True)`)."""
        if not all_map_indices:
            super().clear()
            return
        scope = self.scope
        prefix = task_prefix(scope.dag_id, scope.run_id, scope.task_id)
        refs = self._store._refs(prefix)
        self._backend.clear_prefix(prefix)
        self._store._discard(refs)

    async def aset(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None:
        await asyncio.to_thread(self._set, key, value, retention)


class AssetStateStore(_Accessor):
    """Key/value state of one asset, shared by every task and DAG run that declares it.

    Asset state never expires.
    """

    scope: AssetScope

    def _expiry(self, retention: object, now: float) -> float | None:
        return None

    def _absolute(self, expires: float | None, now: float) -> float | None:
        return None

    def set(self, key: str, value: JsonValue) -> None:
        """Store `value` (JSON, within the size limit) under `key`, replacing any value."""
        self._set(key, value, None)

    def update(self, key: str, fn: Callable[[Any], JsonValue], *, default: Any = None) -> Any:
        """Atomically replace the value with `fn(current or default)`; see TaskStateStore."""
        return self._update(key, fn, default, None)

    def compare_and_set(self, key: str, expected: JsonValue | None, new: JsonValue) -> bool:
        """Write `new` only if the current value equals `expected` (None = key absent)."""
        return self._compare_and_set(key, expected, new, None)

    async def aset(self, key: str, value: JsonValue) -> None:
        await asyncio.to_thread(self._set, key, value, None)


class MetaState:
    """taskstate's own per-task-instance markers, beside (never inside) the user's keys: not
    listed, exported or counted as state, and expiring with the default retention."""

    def __init__(self, store: StateStore, scope: TaskScope) -> None:
        self._store = store
        self._ns = scope.meta_namespace

    def get(self, key: str) -> Any:
        entry = self._store.backend.get(self._ns, key)
        return None if entry is None else json.loads(entry.value)

    def set(self, key: str, value: JsonValue) -> None:
        now = self._store.clock()
        days = self._store.settings.default_retention_days
        text = encode_value(value)
        self._store.backend.set(self._ns, key, text, expires_at(None, days, now), now)

    def clear(self) -> None:
        self._store.backend.clear(self._ns)
