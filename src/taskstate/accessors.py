"""The accessors a task uses: `TaskStateStore`, `AssetStateStore`, and taskstate's own
per-task-instance markers (`MetaState`).

Each accessor holds everything a call needs (namespace, backend, limits, the writer's identity)
so get/set do no lookups beyond validating the input and one backend call.

A write has one path: encode the value (pure: key, JSON and size rules), offload it when a
worker backend is configured (object-store I/O, never inside a database transaction), then one
backend write. Atomic updates run the pure part inside the backend's transaction; with
offloading they compute and upload outside it and commit only if the row is still the one they
read.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from taskstate.backends.base import Entry, HistoryBackend, Row, Stamp, WriteRecorded
from taskstate.errors import (
    HistoryUnavailableError,
    KeyNotFoundError,
    PreconditionFailedError,
    VersionNotFoundError,
)
from taskstate.history import Version, instant
from taskstate.metrics.names import OPERATIONS
from taskstate.scope import (
    META_KIND,
    TASK_KIND,
    AssetScope,
    TaskScope,
    check_writable,
    task_prefix,
)
from taskstate.stored import (
    DEFAULT_EXPIRY,
    GONE,
    KEEP_EXPIRY,
    REF_PREFIX,
    Expiry,
    Page,
    StoredEntry,
    canonical,
    etag_of,
    is_live,
    stored_ref,
)
from taskstate.values import (
    JsonValue,
    check_key,
    check_size,
    encode_value,
    expires_at,
)
from taskstate.writers import Writer, task_writer, writer_text

if TYPE_CHECKING:
    from taskstate.ops import Op
    from taskstate.store import StateStore

T = TypeVar("T")


# Async calls run on taskstate's own small pool, not the event loop's default executor: in
# Airflow's triggerer that default pool is shared by every trigger and by Airflow itself, and a
# burst of state calls from one trigger must not queue the others' work behind it.
OFF_LOOP_THREADS = 4
_pool: tuple[int, ThreadPoolExecutor] | None = None
# What a conditional delete with a write id matches when the key is no longer the version it
# names: no row (its write time is -inf), so only the ledger can answer it.
_NO_VERSION = Entry("", None, None, float("-inf"))
_pool_lock = threading.Lock()


def off_loop(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run `fn(*args)` on taskstate's thread pool; await the result from the running loop."""
    global _pool
    pid = os.getpid()
    pool = _pool
    if pool is None or pool[0] != pid:  # a forked child starts its own threads
        with _pool_lock:
            if _pool is None or _pool[0] != pid:
                _pool = (pid, ThreadPoolExecutor(OFF_LOOP_THREADS, "taskstate-async"))
            pool = _pool
    return asyncio.get_running_loop().run_in_executor(pool[1], fn, *args)


class AccessorHook(Protocol):
    """The accessors' instrumentation hook: what `taskstate.metrics` observes inside an
    operation. An accessor whose `hook` is set calls it; with `hook` None (metrics off) it
    calls nothing. A hook must not raise and must not block (it runs on every write)."""

    def encoded(self, text: str) -> None:
        """A value was encoded for writing (`text`: its JSON)."""

    def offloaded(self, text: str) -> None:
        """A value was uploaded to object storage (`text`: its JSON, before compression)."""

    def retried(self) -> None:
        """An atomic update runs again because another writer committed first."""


def check_limit(limit: object) -> None:
    """`history(key, limit)`'s limit: None (all kept) or an int >= 0."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an int >= 0 or None, got {limit!r}")


class _Accessor:
    """What task and asset state share; subclasses differ in expiry and default writer.

    Instrumentation hook (`taskstate.metrics` uses this, and only this): `OPERATIONS` names,
    for each operation, the one method all its public twins go through (`set`/`aset` ->
    `_set`), so a subclass that wraps those methods times every call exactly once; `hook`
    receives the events inside an operation (`AccessorHook`). The HTTP accessors
    (`taskstate.remote`) keep both."""

    OPERATIONS: ClassVar[dict[str, str]] = OPERATIONS  # the metric names' `<op>` too
    hook: AccessorHook | None = None

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
        self._read = store.read_value
        self._writer = writer_text(writer)
        self._writer_dict = writer  # what a write's StoredEntry shows, without a JSON round trip
        self._history = store.history  # versions kept per key; 0: history off
        self._versioned = cast(HistoryBackend, store.backend)  # used only when history is on

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str, default: Any = None, *, as_of: datetime | None = None) -> Any:
        """The value of `key`, or `default` when it is absent or expired. `as_of` (an aware
        datetime): the value it held at that instant, from its history."""
        if as_of is not None:
            return self._get_as_of(key, default, instant(as_of))
        check_key(key)
        entry = self._backend.get(self._ns, key)
        if entry is None or not is_live(entry.expires_at, self._clock()):
            return default
        value = self._read(self._ns, key, entry.value)
        return default if value is GONE else value

    def _get_as_of(self, key: str, default: Any, at: float) -> Any:
        check_key(key)
        if not self._history:
            raise self._store.no_history(f"{key!r} in {self.scope} has no past values to read")
        found = self._versioned.versions(self._ns, key, limit=1, at=at)
        if found:
            row = found[0]
            if row.value is None or not is_live(row.expires_at, at):
                return default
            return self._store.load_value(row.value)
        first = self._versioned.first_version(self._ns, key)
        if first == 1 or (first is None and self._backend.get(self._ns, key) is None):
            return default  # before the key's first version: it did not exist
        raise HistoryUnavailableError(
            f"the version of {key!r} in {self.scope} that covered that instant is no longer "
            "kept (pruned by taskstate_history_versions / taskstate_history_retention_days); "
            "ask about a later instant or keep more history"
        )

    def history(self, key: str, limit: int | None = None) -> list[Version]:
        """The kept versions of `key`, newest first: at most `limit`, and never more than
        `[state_store] taskstate_history_versions` ([] when history is off)."""
        check_key(key)
        check_limit(limit)
        count = self._history if limit is None else min(limit, self._history)
        if count <= 0:
            return []
        rows = self._versioned.versions(self._ns, key, limit=count)
        return [self._store.version_of(row) for row in rows]

    def restore(self, key: str, version: int, *, if_match: str | None = None) -> Version:
        """Write version `version` of `key` back as a new version (op `restore`), and return
        it. A deletion's version deletes the key. Expiry: the version's own if still ahead,
        else the default retention. `if_match`: only over that etag of the key (else
        `PreconditionFailedError`, nothing written; the API's and UI's If-Match)."""
        check_key(key)
        check_writable(self.scope)
        if not self._history:
            raise self._store.no_history("nothing to restore")
        row = self._versioned.version(self._ns, key, version)
        if row is None:
            raise VersionNotFoundError(
                f"{key!r} in {self.scope} has no kept version {version!r}; "
                "history(key) lists the kept ones"
            )
        now = self._clock()
        if row.value is None:
            if if_match is None:
                self._delete(key, "restore")
            elif not self._delete_if(key, if_match, "restore"):
                raise PreconditionFailedError(
                    f"{key!r} in {self.scope} changed or is absent since it was read (etag "
                    f"{if_match!r} no longer matches); read it again"
                )
        else:
            expiry = row.expires_at
            if expiry is not None and expiry <= now:
                expiry = self._expiry(None, now)
            value = self._store.load_value(row.value)
            self.write(key, value, expires_at=expiry, if_match=if_match, op="restore")
        return self.history(key, 1)[0]

    def keys(self) -> list[str]:
        """The live keys of this scope, ascending."""
        return [row.key for row in self._backend.rows(self._ns, self._clock())]

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) of every live key of this scope, ascending by key."""
        rows = self._backend.rows(self._ns, self._clock())
        values = ((row.key, self._read(self._ns, row.key, row.value)) for row in rows)
        return [(key, value) for key, value in values if value is not GONE]

    def entry(self, key: str) -> StoredEntry | None:
        """`key` with its metadata (updated at/by, expiry, etag), or None if absent or expired."""
        row = self.live_row(key)
        return None if row is None else self._store.entry_of(row)

    def live_row(self, key: str) -> Row | None:
        """`key`'s row as stored (its value still JSON text, maybe an offload reference), or
        None if absent or expired: what the server answers a GET from without decoding it."""
        check_key(key)
        found = self._backend.get(self._ns, key)
        if found is None or not is_live(found.expires_at, self._clock()):
            return None
        at = found.updated_at
        if at is None:  # a third-party backend's `get` without it: look it up
            now = self._clock()
            rows = self._backend.rows(self._ns, now, key_prefix=key)
            return next((r for r in rows if r.key == key), None)
        return Row(self._ns, key, found.value, found.expires_at, at, found.updated_by)

    def page(
        self, *, limit: int = 50, offset: int = 0, key_prefix: str = "", exact_total: bool = False
    ) -> Page[StoredEntry]:
        """Live keys in ascending order, `limit` from `offset`, optionally under `key_prefix`.

        One indexed query of `limit + 1` rows, so a page costs O(offset + limit) whatever the
        scope holds: `total` is exact when the matches end on this page; when more follow it is
        `offset + limit + 1` with `exact` False. `exact_total` (or `limit` 0: only the total is
        wanted) counts every match instead, an index range count, O(matches)."""
        rows = self.row_page(
            limit=limit, offset=offset, key_prefix=key_prefix, exact_total=exact_total
        )
        entries = (self._store.entry_of(row) for row in rows.items)
        return Page([entry for entry in entries if entry is not None], rows.total, rows.exact)

    def row_page(
        self, *, limit: int = 50, offset: int = 0, key_prefix: str = "", exact_total: bool = False
    ) -> Page[Row]:
        """`page` with the rows as stored (values still JSON text, maybe offload references):
        what the server answers a listing from without decoding a value or hashing an ETag a
        listing does not carry (`wire.entry_json`)."""
        now = self._clock()
        ns = self._ns
        if exact_total or limit <= 0:
            rows = (
                self._backend.rows(ns, now, key_prefix=key_prefix, limit=limit, offset=offset)
                if limit > 0
                else []
            )
            return Page(rows, self._backend.count(ns, now, exact=True, key_prefix=key_prefix))
        rows = self._backend.rows(ns, now, key_prefix=key_prefix, limit=limit + 1, offset=offset)
        if len(rows) > limit:
            return Page(rows[:limit], offset + limit + 1, exact=False)
        if rows or offset == 0:
            return Page(rows, offset + len(rows))
        # Past the end: the matches number at most `offset`, and counting them costs what the
        # OFFSET skip just did.
        return Page(
            rows, self._backend.count(ns, now, exact=True, key_prefix=key_prefix, cap=offset + 1)
        )

    # -- writing --------------------------------------------------------------------------

    def _encode(self, key: str, value: object) -> str:
        """The pure half of a write: key, scope and value rules; the size rule unless offloaded."""
        check_key(key)
        check_writable(self.scope)
        text = encode_value(value)
        if not self._offloads(text):
            check_size(text, self._limit, key, offload_configured=self._worker is not None)
        if self.hook is not None:
            self.hook.encoded(text)
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
        if self.hook is not None:
            self.hook.offloaded(text)
        return stored

    def stored_text(self, key: str, value: object, uploaded: list[str]) -> str:
        """A value as a write stores it: checked, encoded, offloaded when configured (its
        object's reference appended to `uploaded`, for removal if the write fails). For the
        store's all-or-nothing import; not the public API."""
        return self._offload(key, self._encode(key, value), uploaded)

    def _set(self, key: str, value: object, retention: object) -> None:
        uploaded: list[str] = []
        text = self.stored_text(key, value, uploaded)
        now = self._clock()
        try:
            self._put(key, text, self._expiry(retention, now), now, "set")
        except BaseException:
            self._store.objects.discard(uploaded)
            raise
        if uploaded and self._worker is not None and not self._history:
            self._worker.committed(self._ns, key, uploaded[0])

    # The backend writes, with a `Stamp` only when history is on (a third-party backend that
    # keeps none never sees one).

    def _put(self, key: str, text: str, expiry: float | None, now: float, op: str) -> None:
        if self._history:
            stamp = Stamp(op, now, self._writer)
            self._versioned.set(self._ns, key, text, expiry, now, self._writer, stamp)
        else:
            self._backend.set(self._ns, key, text, expiry, now, self._writer)

    def _transact(
        self,
        key: str,
        step: Callable[[Entry | None], tuple[Entry | None, T]],
        op: str,
        write_id: str | None = None,
        now: float | None = None,
        keep_value: bool = False,
    ) -> T:
        """`step` on `key` in one backend transaction, stamped `now` (default: the clock's);
        `keep_value`: the ledger keeps the value written with `write_id`."""
        now = self._clock() if now is None else now
        stamp = Stamp(op, now, self._writer) if self._history else None
        ledger = write_id if self._backend.records_writes else None
        if stamp is None and ledger is None:
            return self._backend.transact(self._ns, key, step, now)
        return self._versioned.transact(
            self._ns, key, step, now, stamp, write_id=ledger, keep_value=keep_value
        )

    def _stamp(self, op: str) -> Stamp | None:
        return Stamp(op, self._clock(), self._writer) if self._history else None

    def _expiry(self, retention: object, now: float) -> float | None:
        return expires_at(retention, self._default_days, now)

    def write(
        self,
        key: str,
        value: object,
        *,
        expires_at: float | Expiry | None = DEFAULT_EXPIRY,
        if_match: str | None = None,
        if_none_match: bool = False,
        must_exist: bool = False,
        op: str = "set",
        write_id: str | None = None,
    ) -> StoredEntry:
        """Write with an absolute expiry and optional preconditions (the HTTP API's PUT/PATCH).

        `expires_at`: epoch seconds, None (never), DEFAULT_EXPIRY or KEEP_EXPIRY (ignored for
        assets, which never expire). `if_match`: only if the key's etag is this;
        `if_none_match`: only if the key is absent; `must_exist`: only if present. A failed
        precondition raises `PreconditionFailedError` / `KeyNotFoundError` and writes nothing.
        `write_id` (the API's `X-Taskstate-Write-Id`): when a write with that id was applied
        already, nothing is written and the entry carries that write's etag (its outcome).
        """
        uploaded: list[str] = []
        text = self.stored_text(key, value, uploaded)
        now = self._clock()

        def expiry(current: Entry | None) -> float | None:
            if expires_at is KEEP_EXPIRY and current is not None:
                return self._absolute(current.expires_at, now)
            if isinstance(expires_at, Expiry):
                return self._expiry(None, now)
            return self._absolute(expires_at, now)

        def check(entry: Entry | None) -> Entry | None:
            """The live entry, if the preconditions hold of it; else raises."""
            live = entry if entry is not None and is_live(entry.expires_at, now) else None
            if must_exist and live is None:
                raise KeyNotFoundError(f"no key {key!r} in {self.scope}")
            if if_none_match and live is not None:
                raise PreconditionFailedError(f"{key!r} already exists in {self.scope}")
            if if_match is not None and (live is None or etag_of(*live) != if_match):
                raise PreconditionFailedError(
                    f"{key!r} in {self.scope} changed since it was read (etag {if_match!r} no "
                    "longer matches); read it again"
                )
            return live

        def step(entry: Entry | None) -> tuple[Entry, float | None]:
            new = expiry(check(entry))
            return Entry(text, new, self._writer), new

        if if_match is not None or if_none_match:
            self._fail_early(key, check, write_id)

        try:
            if (
                if_match is None
                and not if_none_match
                and not must_exist
                and (expires_at is not KEEP_EXPIRY)
                and write_id is None
            ):
                written = expiry(None)
                self._put(key, text, written, now, op)
            else:
                # Stamped with the `now` its etag is computed from (the answer's ETag).
                written = self._transact(key, step, op, write_id, now)
        except WriteRecorded as recorded:  # re-sent: the first request's outcome
            self._store.objects.discard(uploaded)
            return StoredEntry(key, value, now, None, self._writer_dict, recorded.etag or "")
        except BaseException:
            self._store.objects.discard(uploaded)
            raise
        etag = etag_of(text, written, self._writer, now)
        return StoredEntry(key, value, now, written, self._writer_dict, etag)

    def _fail_early(
        self, key: str, check: Callable[[Entry | None], object], write_id: str | None
    ) -> None:
        """A conditional write whose precondition already fails, unlocked, fails here: under
        contention (many writers racing one key over HTTP) the losers then never queue on the
        key's lock, each holding a database connection, behind the one that wins. A request
        whose id the ledger may hold (a re-sent copy) goes on: its transaction answers it."""
        try:
            check(self._backend.get(self._ns, key))
        except PreconditionFailedError:
            if write_id is None or not self._backend.records_writes:
                raise
            if not self._backend.may_be_recorded(write_id):
                raise
        except KeyNotFoundError:
            pass  # `must_exist`: its 404 comes from the transaction, as before

    def _absolute(self, expires: float | None, now: float) -> float | None:
        return expires

    def delete(self, key: str) -> None:
        """Remove `key`; a no-op when it is absent."""
        check_key(key)
        self._delete(key, "delete")

    def _delete(self, key: str, op: str) -> None:
        old = self._backend.get(self._ns, key) if self._worker is not None else None
        if self._history:
            self._versioned.delete(self._ns, key, self._stamp(op))
        else:
            self._backend.delete(self._ns, key)
        if old is not None and (ref := stored_ref(old.value)):
            self._store.objects.discard_superseded([ref])

    def delete_if(self, key: str, if_match: str | None, *, write_id: str | None = None) -> bool:
        """Remove `key` only if it is live and (with `if_match`) still that version; False
        when it changed or is absent (the HTTP API's DELETE with If-Match). `write_id`: True
        when a delete with that id was applied already (nothing is deleted again)."""
        return self._delete_if(key, if_match, "delete", write_id)

    def _delete_if(
        self, key: str, if_match: str | None, op: str, write_id: str | None = None
    ) -> bool:
        check_key(key)
        found = self._backend.get(self._ns, key)
        matches = (
            found is not None
            and is_live(found.expires_at, self._clock())
            and (if_match is None or etag_of(*found) == if_match)
        )
        ledger = write_id is not None and self._backend.records_writes
        if not matches and not ledger:
            return False
        if ledger:
            # No longer that version: maybe because this very delete, sent before, removed
            # it. The backend looks the id up (and deletes a version no row has: nothing).
            version = found if matches and found is not None else _NO_VERSION
            try:
                gone = self._versioned.delete_if(
                    self._ns, key, version, self._stamp(op), write_id=write_id
                )
            except WriteRecorded:
                return True
        elif self._history:
            assert found is not None
            gone = self._versioned.delete_if(self._ns, key, found, self._stamp(op))
        else:
            assert found is not None
            gone = self._backend.delete_if(self._ns, key, found)
        if not gone or found is None:
            return False
        if ref := stored_ref(found.value):
            self._store.objects.discard_superseded([ref])
        return True

    def clear(self) -> None:
        """Remove every key of this scope (a mapped task: this map index only)."""
        refs = self._store.objects.refs(self._ns, exact=True)
        if self._history:
            self._versioned.clear(self._ns, self._stamp("clear"))
        else:
            self._backend.clear(self._ns)
        self._store.objects.discard_superseded(refs)

    def _update(
        self,
        key: str,
        fn: Callable[[Any], Any],
        default: Any,
        retention: object,
        write_id: str | None = None,
    ) -> Any:
        check_key(key)

        def decide(present: bool, current: Any) -> tuple[str, Any]:
            new = fn(current if present else default)
            return self._encode(key, new), new

        return self._atomic(key, decide, retention, "update", write_id)

    def apply(self, key: str, op: Op, default: Any, retention: object, write_id: str | None) -> Any:
        """`update(key, op, default=...)` for the HTTP API's update route: the new value. A
        request re-sent with a recorded `write_id` applies nothing and answers the first
        one's new value, which the ledger kept with it; `GONE` when the id was recorded by
        another kind of write (its value not kept). Not the public API."""
        try:
            return self._update(key, op, default, retention, write_id)
        except WriteRecorded as recorded:
            return GONE if recorded.value is None else self._store.load_value(recorded.value)

    def _compare_and_set(self, key: str, expected: Any, new: Any, retention: object) -> bool:
        # `expected` obeys the value rules too: a tuple is refused, not taken for a list.
        want = None if expected is None else canonical(encode_value(expected))
        text = self._encode(key, new)

        def decide(present: bool, current: Any) -> tuple[str | None, bool]:
            have = canonical(encode_value(current)) if present else None
            return (text, True) if have == want else (None, False)

        return self._atomic(key, decide, retention, "compare_and_set")

    def _atomic(
        self,
        key: str,
        decide: Callable[[bool, Any], tuple[str | None, T]],
        retention: object,
        op: str,
        write_id: str | None = None,
    ) -> T:
        """Read-modify-write of one key. `decide(present, current)` returns the encoded new
        value (None: write nothing) and the result. Without offloading it runs inside the
        backend's transaction; with it, the upload happens outside and the write commits only
        if the row is still the one that was read (else everything runs again). `write_id`:
        recorded with the write; `WriteRecorded` when a write with it was applied already."""
        if self._worker is None:

            def step(entry: Entry | None) -> tuple[Entry | None, T]:
                now = self._clock()
                live = entry is not None and is_live(entry.expires_at, now)
                text, result = decide(
                    live, self._store.load_value(entry.value) if live and entry else None
                )
                if text is None:
                    return None, result
                return Entry(text, self._expiry(retention, now), self._writer), result

            return self._transact(key, step, op, write_id, keep_value=True)
        while True:
            seen = self._backend.get(self._ns, key)
            now = self._clock()
            current = GONE
            if seen is not None and is_live(seen.expires_at, now):
                current = self._read(self._ns, key, seen.value)
            text, result = decide(current is not GONE, None if current is GONE else current)
            if text is None:
                return result
            uploaded: list[str] = []
            stored = self._offload(key, text, uploaded)
            entry = Entry(stored, self._expiry(retention, now), self._writer)
            if self._commit_if_unchanged(key, seen, entry, uploaded, op, write_id):
                return result

    def _commit_if_unchanged(
        self,
        key: str,
        seen: Entry | None,
        entry: Entry,
        uploaded: list[str],
        op: str,
        write_id: str | None = None,
    ) -> bool:
        def step(current: Entry | None) -> tuple[Entry | None, bool]:
            return (entry, True) if current == seen else (None, False)

        try:
            done = self._transact(key, step, op, write_id, keep_value=True)
        except BaseException:
            self._store.objects.discard(uploaded)
            raise
        if not done:
            self._store.objects.discard(uploaded)
            if self.hook is not None:
                self.hook.retried()
        elif seen is not None and (old := stored_ref(seen.value)):
            self._store.objects.discard_superseded([old])
        return done

    # -- async twins ----------------------------------------------------------------------

    # Thread offload keeps one implementation of each operation; the event loop never blocks.

    async def aget(self, key: str, default: Any = None, *, as_of: datetime | None = None) -> Any:
        """`get` for async code (deferrable operators, triggers)."""
        return await off_loop(functools.partial(self.get, key, default, as_of=as_of))

    async def ahistory(self, key: str, limit: int | None = None) -> list[Version]:
        """`history` for async code."""
        return await off_loop(self.history, key, limit)

    async def arestore(self, key: str, version: int, *, if_match: str | None = None) -> Version:
        """`restore` for async code."""
        return await off_loop(functools.partial(self.restore, key, version, if_match=if_match))

    async def adelete(self, key: str) -> None:
        """`delete` for async code."""
        await off_loop(self.delete, key)

    async def aclear(self) -> None:
        """`clear` for async code."""
        await off_loop(self.clear)

    async def aupdate(self, key: str, fn: Callable[[Any], Any], *, default: Any = None) -> Any:
        """`update` for async code (`fn` runs on taskstate's thread, maybe more than once)."""
        return await off_loop(functools.partial(self.update, key, fn, default=default))  # type: ignore[attr-defined]

    async def acompare_and_set(self, key: str, expected: Any, new: Any) -> bool:
        """`compare_and_set` for async code."""
        return bool(await off_loop(self.compare_and_set, key, expected, new))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.scope!r}>"


class TaskStateStore(_Accessor):
    """Key/value state of one task instance, shared by all of its tries.

    `retention`: None → `[state_store] default_retention_days` (0 = never), a `timedelta`,
    or `NEVER_EXPIRE`. An expired key reads as absent.

    >>> import tempfile
    >>> from taskstate import StateStore, TaskScope
    >>> store = StateStore(f"sqlite:///{tempfile.mkdtemp()}/state.db")
    >>> state = store.task_state(TaskScope("etl", "run_1", "load"))
    >>> state.update("rows", lambda n: n + 10, default=0)
    10
    >>> state.compare_and_set("owner", None, "try 1"), state.compare_and_set("owner", None, "try 2")
    (True, False)
    >>> state.delete("rows"); state.items()
    [('owner', 'try 1')]
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
        # The store's one clear path, without the markers: this is called from a running task,
        # and the other map indices' running tries keep their attempt markers.
        scope = self.scope
        self._store.clear_task_rows(
            scope.dag_id, scope.run_id, scope.task_id, None, self._writer_dict
        )

    async def aset(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None:
        """`set` for async code."""
        await off_loop(self._set, key, value, retention)


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
        """`set` for async code."""
        await off_loop(self._set, key, value, None)


class MetaState:
    """taskstate's own per-task-instance markers, beside (never inside) the user's keys: not
    listed, exported or counted as state, and expiring with the default retention unless
    told otherwise. A marker obeys the key rules and the value size limit like any key."""

    def __init__(self, store: StateStore, scope: TaskScope) -> None:
        self._store = store
        self._scope = scope
        self._ns = scope.meta_namespace

    def get(self, key: str) -> Any:
        """One marker's value, or None when it is not set or has expired (markers are JSON,
        never offloaded)."""
        entry = self._store.backend.get(self._ns, key)
        if entry is None or not is_live(entry.expires_at, self._store.clock()):
            return None
        return json.loads(entry.value)

    def set(
        self, key: str, value: JsonValue, *, until: float | Expiry | None = DEFAULT_EXPIRY
    ) -> None:
        """`until`: epoch seconds, None (never) or DEFAULT_EXPIRY."""
        check_key(key)
        text = encode_value(value)
        check_size(
            text, self._store.settings.max_value_storage_bytes, key, offload_configured=False
        )
        now = self._store.clock()
        days = self._store.settings.default_retention_days
        when = expires_at(None, days, now) if isinstance(until, Expiry) else until
        self._store.backend.set(self._ns, key, text, when, now)

    def clear(self, *, all_map_indices: bool = False) -> None:
        """Remove the markers (`all_map_indices`: of every map index of the task)."""
        if not all_map_indices:
            self._store.backend.clear(self._ns)
            return
        s = self._scope
        prefix = task_prefix(s.dag_id, s.run_id, s.task_id)
        self._store.backend.clear_prefix(META_KIND + prefix[len(TASK_KIND) :])
