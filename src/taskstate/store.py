"""`StateStore`: backend + settings + clock, and every operation on stored state. The CLI, the
HTTP API, the UI, transfer and the Airflow code are its clients and never reach a backend
themselves. The accessors a task uses live in `taskstate.accessors`; what a stored row means
(reference format, expiry rule, writer, etag) in `taskstate.stored`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from taskstate.accessors import AssetStateStore, MetaState, TaskStateStore, _Accessor
from taskstate.backends import load_worker_backend, open_backend
from taskstate.backends.base import (
    HistoryBackend,
    KeyVersion,
    Row,
    SchemaStatus,
    Stamp,
    StateBackend,
    VersionRow,
    WorkerStateBackend,
)
from taskstate.cleanup import (
    CleanupResult,
    LiveRefIndex,
    delete_expired,
    forget_writes,
    prune_versions,
)
from taskstate.discovery import Discovery
from taskstate.errors import (
    BackendError,
    ConfigError,
    HistoryUnavailableError,
    OffloadedValueMissingError,
)
from taskstate.history import OPS, VALUELESS_OPS, Version, instant, utc, writer_dict
from taskstate.metrics import Metrics, configured
from taskstate.scope import META_PREFIX, AssetScope, TaskScope, parse_namespace, task_prefix
from taskstate.settings import Settings
from taskstate.stored import (
    DEFAULT_EXPIRY,
    GONE,
    KEEP_EXPIRY,
    REF_PREFIX,
    Page,
    StoredEntry,
    etag_of,
    is_live,
    stored_ref,
)
from taskstate.values import check_key, decode_value, expires_at
from taskstate.writers import Writer, task_writer, writer_text

if TYPE_CHECKING:
    from taskstate.backends.http import HttpBackend

ImportEntry = tuple[TaskScope | AssetScope, str, object, float | None, float | None, Writer | None]
"""(scope, key, value, expires_at, updated_at, updated_by) for `StateStore.import_entries`."""


class KeyChange(NamedTuple):
    """One key `StateStore.restore_task` would change (`restore_task_preview`): its value at
    `as_of` (`then`) and now (`now`), None where it held none."""

    map_index: int
    key: str
    then: Any
    now: Any


class ImportVersion(NamedTuple):
    """A kept version of a key, as `export --with-history` wrote it, for `import_entries`;
    `value` None for a deletion."""

    scope: TaskScope | AssetScope
    key: str
    version: int
    value: object
    expires_at: float | None
    updated_at: float
    updated_by: Writer | None
    op: str


__all__ = [
    "DEFAULT_EXPIRY",
    "KEEP_EXPIRY",
    "REF_PREFIX",
    "AssetStateStore",
    "MetaState",
    "Page",
    "StateStore",
    "StoredEntry",
    "TaskStateStore",
    "Writer",
    "etag_of",
    "stored_ref",
    "task_writer",
]


class OffloadedObjects:
    """The objects in object storage behind a store's offloaded values: which ones rows
    reference, and removing the ones no committed row references any more.

    Part of the store's small internal interface with its accessors (`StateStore.objects`,
    `StateStore.read_value`): nothing outside `store` and `accessors` should need it.
    """

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def refs(self, prefix: str, *, exact: bool = False) -> list[str]:
        """References held by the rows under `prefix` (`exact`: of namespace `prefix` only),
        expired ones too, read before those rows are deleted: an index range of that
        namespace (map index 1's never reads map index 10's rows), or of the prefix."""
        if self._store.worker_backend is None:
            return []
        backend = self._store.backend
        rows = backend.rows(prefix, -math.inf) if exact else backend.scan(prefix)
        return [ref for row in rows if (ref := stored_ref(row.value))]

    def discard_superseded(self, refs: list[str]) -> None:
        """Remove the objects of rows just deleted or replaced, unless history keeps them (a
        kept version refers to them; `cleanup` sweeps them once no version does)."""
        if not self._store.history:
            self.discard(refs)

    def discard(self, refs: list[str]) -> None:
        """Remove objects that no committed row references (references are unique per write,
        so a deleted or superseded row's object is nobody else's)."""
        worker = self._store.worker_backend
        if refs and worker is not None:
            worker.discard(refs)


class StateStore:
    """Entry point: `StateStore()` uses the configured backend; `StateStore(url)` opens one.

    >>> import tempfile
    >>> store = StateStore(f"sqlite:///{tempfile.mkdtemp()}/state.db")
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
        metrics: Metrics | None = None,
        create: bool = True,
    ) -> None:
        """`create=False`: reading a SQLite file that does not exist raises
        `DatabaseMissingError` instead of creating it."""
        self.settings = settings if settings is not None else Settings.load()
        self.backend = (
            backend if backend is not None else open_backend(url, self.settings, create=create)
        )
        self.worker_backend = (
            worker_backend if worker_backend is not None else load_worker_backend(self.settings)
        )
        self.clock = clock
        self._remote = getattr(self.backend, "remote", False)  # values over HTTP
        if self._remote and self.worker_backend is not None:
            raise ConfigError(
                "[workers] state_store_backend (offloading) is configured, but the state is "
                f"reached over HTTP ({self.describe()}): the server's store decides where "
                "values live. Configure offloading on the server, and remove it here"
            )
        # History: on when configured and the backend keeps it (the built-in SQL backends).
        self.history = self.settings.history_versions if self.backend.keeps_history else 0
        if self.backend.keeps_history:
            self.backend.history_versions = self.history
        # Metrics/tracing (taskstate.metrics): `accessor_class` is the plain class when off.
        self.metrics = metrics if metrics is not None else configured()
        self.objects = OffloadedObjects(self)

    def task_state(self, scope: TaskScope, *, writer: Writer | None = None) -> TaskStateStore:
        """The state of one task instance. Writes record `writer` (default: the task itself)."""
        if self._remote:
            from taskstate.remote import RemoteTaskState

            return self.metrics.accessor_class(RemoteTaskState)(self, scope, writer)
        return self.metrics.accessor_class(TaskStateStore)(self, scope, writer)

    def asset_state(self, scope: AssetScope, *, writer: Writer | None = None) -> AssetStateStore:
        """The state of one asset. Writes record `writer` (default: unknown)."""
        if self._remote:
            from taskstate.remote import RemoteAssetState

            return self.metrics.accessor_class(RemoteAssetState)(self, scope, writer)
        return self.metrics.accessor_class(AssetStateStore)(self, scope, writer)

    def meta(self, scope: TaskScope) -> MetaState:
        """taskstate's own markers for a task instance (re-run and re-expansion detection)."""
        if self._remote:
            from taskstate.remote import RemoteMeta

            return RemoteMeta(self, scope)  # type: ignore[return-value]
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
            if is_live(row.expires_at, now) and not row.namespace.startswith(META_PREFIX):
                yield row

    def read_value(self, namespace: str, key: str, text: str) -> Any:
        """Decode a row's value; the accessors read every row through this. Its offloaded
        object may vanish between reading the row and reading the object when a concurrent
        delete or set supersedes the row: then read the row again (GONE once it no longer
        exists). A row that still names a missing object is an error."""
        while True:
            try:
                return self.load_value(text)
            except OffloadedValueMissingError:
                entry = self.backend.get(namespace, key)
                if entry is None or not is_live(entry.expires_at, self.clock()):
                    return GONE
                if entry.value == text:
                    raise
                text = entry.value

    def entry_of(self, row: Row) -> StoredEntry | None:
        """A row as the API shows it; None if it was deleted while being read."""
        value = self.read_value(row.namespace, row.key, row.value)
        if value is GONE:
            return None
        etag = etag_of(row.value, row.expires_at, row.updated_by, row.updated_at)
        writer = writer_dict(row.updated_by)
        return StoredEntry(row.key, value, row.updated_at, row.expires_at, writer, etag)

    def version_of(self, row: VersionRow) -> Version:
        """A kept version as `history()` shows it."""
        value = None if row.value is None else self.load_value(row.value)
        return Version(
            row.version,
            value,
            row.op,
            utc(row.updated_at),  # type: ignore[arg-type]
            writer_dict(row.updated_by),
            utc(row.expires_at),
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

    def discovery(self) -> Discovery:
        """Which DAGs, runs, task instances and assets hold live state, paged (indexed)."""
        return Discovery(self.backend, self.clock())

    # -- maintenance --------------------------------------------------------------------------

    def clear_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        map_index: int | None = None,
        writer: Writer | None = None,
    ) -> int:
        """Delete a task instance's state (`map_index=None`: every map index): its rows, their
        offloaded objects and taskstate's markers. Returns how many keys went."""
        count = self.clear_task_rows(dag_id, run_id, task_id, map_index, writer)
        if map_index is None:
            self.backend.clear_prefix(TaskScope(dag_id, run_id, task_id).meta_namespace[:-2])
        else:
            self.backend.clear(TaskScope(dag_id, run_id, task_id, map_index).meta_namespace)
        return count

    def clear_task_rows(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int | None,
        writer: Writer | None,
    ) -> int:
        """`clear_task` without taskstate's markers: the rows (one clear version each when
        history is kept) and their offloaded objects. Returns how many keys went. Part of the
        store's internal interface with its accessors, not the public API."""
        if map_index is None:
            prefix = task_prefix(dag_id, run_id, task_id)
            refs = self.objects.refs(prefix)
            count = (
                self._versioned.clear_prefix(prefix, self._stamp("clear", writer))
                if self.history
                else self.backend.clear_prefix(prefix)
            )
        else:
            scope = TaskScope(dag_id, run_id, task_id, map_index)
            refs = self.objects.refs(scope.namespace, exact=True)
            count = (
                self._versioned.clear(scope.namespace, self._stamp("clear", writer))
                if self.history
                else self.backend.clear(scope.namespace)
            )
        self.objects.discard_superseded(refs)
        return count

    def no_history(self, what: str) -> HistoryUnavailableError:
        """The error for a past value asked of a store that keeps no history, saying why."""
        if not self.backend.keeps_history:
            why = f"{self.describe()} keeps no history (docs/history.md says where it works)"
        else:
            why = "history is off ([state_store] taskstate_history_versions = 0)"
        return HistoryUnavailableError(f"{why}: {what}")

    def _stamp(self, op: str, writer: Writer | None) -> Stamp:
        return Stamp(op, self.clock(), writer_text(writer))

    @property
    def _versioned(self) -> HistoryBackend:
        """The backend, as one that keeps history (only used when `self.history`)."""
        return cast(HistoryBackend, self.backend)

    def restore_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        as_of: datetime,
        map_index: int | None = None,
        writer: Writer | None = None,
    ) -> int:
        """Put back every key the task instance (`map_index=None`: every map index) held at
        `as_of`, in one transaction: keys created since are deleted. The undo of a clear.
        Returns how many keys were live at `as_of` (now live again)."""
        at = instant(as_of)
        if self._remote:  # the server's store keeps the history, and restores it
            remote = cast("HttpBackend", self.backend)
            return remote.restore_task(dag_id, run_id, task_id, as_of, map_index)
        kept, deletes = self._task_as_of(dag_id, run_id, task_id, as_of, at, map_index)
        now = self.clock()
        writes: list[Row] = []
        for namespace, key, version in kept:
            expiry = version.expires_at
            if expiry is not None and expiry <= now:
                expiry = expires_at(None, self.settings.default_retention_days, now)
            # An offloaded value keeps its object: a kept version refers to it, so it stays.
            writes.append(Row(namespace, key, cast(str, version.value), expiry, now, None))
        self._versioned.restore_many(writes, deletes, Stamp("restore", now, writer_text(writer)))
        return len(writes)

    def restore_task_preview(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        as_of: datetime,
        map_index: int | None = None,
    ) -> list[KeyChange]:
        """What `restore_task` with the same arguments would change, writing nothing: one
        `KeyChange` per key it would bring back (`then` set; as many as it would return) or
        delete (`then` None, `now` set), in (map index, key) order. The UI shows it before
        the person confirms."""
        at = instant(as_of)
        if self._remote:
            remote = cast("HttpBackend", self.backend)
            found = remote.restore_task_preview(dag_id, run_id, task_id, as_of, map_index)
            return [KeyChange(*change) for change in found]
        kept, deletes = self._task_as_of(dag_id, run_id, task_id, as_of, at, map_index)
        then = {(ns, key): self.load_value(cast(str, v.value)) for ns, key, v in kept}
        changes = []
        for namespace, key in sorted({*then, *deletes}):
            scope = parse_namespace(namespace)
            assert isinstance(scope, TaskScope)
            entry = self._accessor(scope, None).entry(key)
            now = None if entry is None else entry.value
            if (namespace, key) in then or now is not None:
                changes.append(KeyChange(scope.map_index, key, then.get((namespace, key)), now))
        return sorted(changes)

    def _task_as_of(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        as_of: datetime,
        at: float,
        map_index: int | None,
    ) -> tuple[list[tuple[str, str, VersionRow]], list[tuple[str, str]]]:
        """`restore_task`'s plan: the versions live at `at` (to write back) and the
        (namespace, key) of every key held then by no value (to delete)."""
        if not self.history:
            raise self.no_history("nothing to restore")
        if map_index is None:
            prefix = task_prefix(dag_id, run_id, task_id)
        else:
            prefix = TaskScope(dag_id, run_id, task_id, map_index).namespace
        kept: list[tuple[str, str, VersionRow]] = []
        deletes: list[tuple[str, str]] = []
        for namespace, key, version in self._versioned.task_versions(prefix, at):
            if map_index is not None and namespace != prefix:
                continue
            if version is None:
                first = self._versioned.first_version(namespace, key)
                if first not in (None, 1):
                    raise HistoryUnavailableError(
                        f"the version of {key!r} that covered {as_of.isoformat()} is no longer "
                        "kept; restore a later instant or keep more history"
                    )
                if first is None:
                    continue  # written before history was on: nothing known about `as_of`
                deletes.append((namespace, key))
            elif version.value is None or not is_live(version.expires_at, at):
                deletes.append((namespace, key))
            else:
                kept.append((namespace, key, version))
        return kept, deletes

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
        accessor.write(key, value, expires_at=expires, op="import")

    def import_entries(
        self, entries: Iterable[ImportEntry | ImportVersion], *, replace: bool = True
    ) -> int:
        """Write many keys all or nothing: every value is checked and offloaded first, then one
        backend transaction writes them all. `replace=False` keeps keys that already exist.
        Each entry keeps its `updated_at` (None: now) and its writer as given (None: unknown),
        so a restored backup says who wrote each key and when. `ImportVersion`s (an export's
        history) go in the same transaction, before the keys' own `import` versions, numbered
        after each key's mark (docs/history.md); ignored with history off. Returns how many
        rows were written."""
        with self.metrics.timer("taskstate.store.import"):
            return self._import_entries(entries, replace)

    def _import_entries(self, entries: Iterable[ImportEntry | ImportVersion], replace: bool) -> int:
        now = self.clock()
        rows: list[Row] = []
        versions: list[KeyVersion] = []
        numbers: set[tuple[str, str, int]] = set()
        uploaded: list[str] = []
        try:
            for item in entries:
                if isinstance(item, ImportVersion):
                    if not self.history:
                        continue  # nowhere to keep it (and nothing to upload for it)
                    kept = self._imported_version(item, uploaded)
                    if (kept.namespace, kept.key, item.version) in numbers:
                        raise ValueError(f"version {item.version} of {item.key!r} is there twice")
                    numbers.add((kept.namespace, kept.key, item.version))
                    versions.append(kept)
                    continue
                scope, key, value, expires, updated_at, writer = item
                accessor = self._accessor(scope, None)
                text = accessor.stored_text(key, value, uploaded)
                expiry = expires if isinstance(scope, TaskScope) else None
                at = now if updated_at is None else updated_at
                rows.append(Row(scope.namespace, key, text, expiry, at, writer_text(writer)))
            if self.history:
                # Each imported key's version is stamped with the import time, so
                # `get(as_of=...)` never predates its arrival here.
                stamp = Stamp("import", now)
                return self._versioned.set_many(
                    rows, replace=replace, stamp=stamp, versions=versions
                )
            return self.backend.set_many(rows, replace=replace)
        except BaseException:
            self.objects.discard(uploaded)
            raise

    def _imported_version(self, item: ImportVersion, uploaded: list[str]) -> KeyVersion:
        """An export's version, checked by the same rules as a write (offloaded like one)."""
        if item.op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {item.op!r}")
        if not isinstance(item.version, int) or not 1 <= item.version < 1 << 62:
            raise ValueError(f"version must be a positive integer, got {item.version!r}")
        check_key(item.key)
        text = None
        if item.value is not None:
            text = self._accessor(item.scope, None).stored_text(item.key, item.value, uploaded)
        elif item.op not in VALUELESS_OPS:
            raise ValueError(
                f"a {item.op!r} version needs a value (only {VALUELESS_OPS} have none)"
            )
        expiry = item.expires_at if isinstance(item.scope, TaskScope) else None
        row = VersionRow(
            item.version, text, expiry, item.updated_at, writer_text(item.updated_by), item.op
        )
        return KeyVersion(item.scope.namespace, item.key, row)

    def kept_versions(
        self, prefix: str = ""
    ) -> Iterator[tuple[TaskScope | AssetScope, str, Version]]:
        """Every kept version of every key under `prefix` (deleted keys' too), each key's oldest
        first (`export --with-history`)."""
        if not self.history:
            raise self.no_history("there are no versions to export")
        for namespace, key in self._versioned.version_keys(prefix):
            scope = parse_namespace(namespace)
            for row in reversed(self._versioned.versions(namespace, key, limit=self.history)):
                yield scope, key, self.version_of(row)

    def cleanup(
        self,
        *,
        batch_size: int | None = None,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> CleanupResult:
        """Delete expired task state in bounded batches, then sweep offloaded objects no row
        references any more (past the worker backend's grace period)."""
        with self.metrics.timer("taskstate.cleanup"):
            result = self._cleanup(batch_size, dry_run, on_batch)
        self.metrics.cleanup_done(result)
        return result

    def _cleanup(
        self, batch_size: int | None, dry_run: bool, on_batch: Callable[[int], None] | None
    ) -> CleanupResult:
        size = self.settings.state_cleanup_batch_size if batch_size is None else batch_size
        now = self.clock()
        result = delete_expired(
            self.backend,
            now,
            batch_size=size,
            dry_run=dry_run,
            on_batch=on_batch,
            history=bool(self.history),
        )
        if self.backend.keeps_history and not dry_run:
            # History off (0) prunes every version; otherwise beyond the number and age kept.
            days = self.settings.history_retention_days
            before = now - days * 86400 if days and self.history else None
            result = result.with_pruned(
                prune_versions(
                    self.backend,
                    keep=self.history,
                    before=before,
                    batch_size=size,
                    on_batch=on_batch,
                )
            )
        if self.backend.records_writes and not dry_run:
            forgotten = forget_writes(self.backend, now, batch_size=size, on_batch=on_batch)
            result = result.with_forgotten(forgotten)
        worker = self.worker_backend
        if worker is None:
            return result
        # An expired row reads as absent, so its object is an orphan even before (dry run)
        # or after (a key expiring meanwhile) the row itself goes.
        # The references go to a temporary file, not a set: memory stays bounded by a batch.
        now = self.clock()
        rows = (row.value for row in self.backend.scan() if is_live(row.expires_at, now))
        # Objects a kept history version refers to stay too (restore may bring them back).
        texts = itertools.chain(rows, self.backend.version_refs())
        refs = (ref for text in texts if (ref := stored_ref(text)) is not None)
        with LiveRefIndex(refs) as live:
            return result.with_orphans(worker.sweep_orphans(live, dry_run=dry_run))

    def probe(self) -> None:
        """One indexed read (a key that need not exist): raises when the store cannot serve.
        The HTTP API's readiness check."""
        self.backend.get(META_PREFIX + "health", "probe")

    def describe(self) -> str:
        """Which backend holds the state, never with credentials (for logs, doctor, health)."""
        return self.backend.describe()

    def schema_status(self) -> SchemaStatus:
        """The backend's schema version against the newest this taskstate knows (`taskstate db
        check`)."""
        return self.backend.schema_status()

    def migrate(self) -> list[int]:
        """Bring the backend's schema up to date; returns the versions applied."""
        return self.backend.migrate()

    def close(self) -> None:
        """Release the backend's connections; the store is unusable afterwards."""
        self.backend.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateStore({self.describe()!r})"

    def _accessor(self, scope: TaskScope | AssetScope, writer: Writer | None) -> _Accessor:
        if isinstance(scope, TaskScope):
            return self.task_state(scope, writer=writer)
        return self.asset_state(scope, writer=writer)
