"""`StateStore` (backend + settings + clock) and the two accessors a task uses.

The accessors hold everything a call needs (namespace, backend, limits) so get/set do no
lookups beyond validating the input and one backend call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from taskstate.backends import load_worker_backend, open_backend
from taskstate.backends.base import Entry, StateBackend, WorkerStateBackend
from taskstate.scope import AssetScope, TaskScope, check_writable
from taskstate.settings import Settings
from taskstate.values import (
    JsonValue,
    check_key,
    check_size,
    decode_value,
    encode_value,
    expires_at,
)

# How an offloaded value's reference is kept in the database.
REF_MARKER = "__taskstate_ref__"


def stored_ref(text: str) -> str | None:
    """The offload reference a stored value holds, or None for an inline value."""
    if REF_MARKER not in text:
        return None
    value = decode_value(text)
    ref = value.get(REF_MARKER) if type(value) is dict and len(value) == 1 else None
    return ref if isinstance(ref, str) else None


class StateStore:
    """Entry point: `StateStore()` uses the configured backend; `StateStore(url)` opens one."""

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

    def task_state(self, scope: TaskScope) -> TaskStateStore:
        return TaskStateStore(self, scope)

    def asset_state(self, scope: AssetScope) -> AssetStateStore:
        return AssetStateStore(self, scope)

    def load_value(self, text: str) -> Any:
        """Decode stored JSON text, following an offload reference when one is configured."""
        ref = None if self.worker_backend is None else stored_ref(text)
        if ref is not None and self.worker_backend is not None:
            return decode_value(self.worker_backend.deserialize_from_ref(ref))
        return decode_value(text)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateStore({self.backend.describe()!r})"


class _Accessor:
    """What task and asset state share; subclasses differ only in expiry."""

    def __init__(self, store: StateStore, scope: TaskScope | AssetScope) -> None:
        self.scope = scope
        self._ns = scope.namespace
        self._backend = store.backend
        self._worker = store.worker_backend
        self._clock = store.clock
        self._limit = store.settings.max_value_storage_bytes
        self._default_days = store.settings.default_retention_days
        self._load = store.load_value

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        check_key(key)
        entry = self._backend.get(self._ns, key)
        if entry is None or (entry.expires_at is not None and entry.expires_at <= self._clock()):
            return default
        return self._load(entry.value)

    def keys(self) -> list[str]:
        return [key for key, _ in self._live_rows()]

    def items(self) -> list[tuple[str, Any]]:
        return [(key, self._load(text)) for key, text in self._live_rows()]

    def _live_rows(self) -> list[tuple[str, str]]:
        now = self._clock()
        return [
            (row.key, row.value)
            for row in self._backend.scan(self._ns)
            if row.namespace == self._ns and (row.expires_at is None or row.expires_at > now)
        ]

    # -- writing --------------------------------------------------------------------------

    def _stored_text(self, key: str, value: object) -> str:
        """Validate, offload if configured, and size-check: everything before any I/O."""
        check_key(key)
        check_writable(self.scope)
        text = encode_value(value)
        worker = self._worker
        if worker is not None and (
            worker.threshold is None or len(text.encode("utf-8")) > worker.threshold
        ):
            ref = worker.serialize_to_ref(self._ns, key, text)
            text = json.dumps({REF_MARKER: ref}, ensure_ascii=False, separators=(",", ":"))
        check_size(text, self._limit, key, offload_configured=worker is not None)
        return text

    def _write(self, key: str, value: object, retention: object) -> None:
        text = self._stored_text(key, value)
        now = self._clock()
        self._backend.set(self._ns, key, text, self._expiry(retention, now), now)
        if self._worker is not None and (ref := stored_ref(text)) is not None:
            self._worker.committed(self._ns, key, ref)

    def _expiry(self, retention: object, now: float) -> float | None:
        return expires_at(retention, self._default_days, now)

    def _restore(self, key: str, value: object, expires: float | None) -> None:
        """Write with an absolute expiry (import/restore); same validation as `set`."""
        text = self._stored_text(key, value)
        self._backend.set(self._ns, key, text, self._expiry_of(expires), self._clock())

    def _expiry_of(self, expires: float | None) -> float | None:
        return expires

    def delete(self, key: str) -> None:
        """Remove `key`; a no-op when it is absent."""
        check_key(key)
        self._backend.delete(self._ns, key)
        if self._worker is not None:
            self._worker.delete(self._ns, key)

    def clear(self) -> None:
        """Remove every key of this scope (a mapped task: this map index only)."""
        self._backend.clear(self._ns)
        if self._worker is not None:
            self._worker.clear(self._ns)

    def _update(self, key: str, fn: Callable[[Any], Any], default: Any, retention: object) -> Any:
        check_key(key)

        def step(entry: Entry | None) -> tuple[Entry | None, Any]:
            now = self._clock()
            live = entry is not None and (entry.expires_at is None or entry.expires_at > now)
            current = self._load(entry.value) if live and entry is not None else default
            new = fn(current)
            return Entry(self._stored_text(key, new), self._expiry(retention, now)), new

        return self._backend.transact(self._ns, key, step, self._clock())

    def _compare_and_set(self, key: str, expected: Any, new: Any, retention: object) -> bool:
        text = self._stored_text(key, new)
        want = None if expected is None else _canonical(expected)

        def step(entry: Entry | None) -> tuple[Entry | None, bool]:
            now = self._clock()
            live = entry is not None and (entry.expires_at is None or entry.expires_at > now)
            have = _canonical(self._load(entry.value)) if live and entry is not None else None
            if have != want:
                return None, False
            return Entry(text, self._expiry(retention, now)), True

        return self._backend.transact(self._ns, key, step, self._clock())

    # -- async twins ----------------------------------------------------------------------

    async def aget(self, key: str, default: Any = None) -> Any:
        return await asyncio.to_thread(self.get, key, default)

    async def adelete(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.scope!r}>"


def _canonical(value: Any) -> str:
    """Equality that JSON sees: key order ignored, `True` != `1`, `1.0` != `1`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class TaskStateStore(_Accessor):
    """Key/value state of one task instance, shared by all of its tries.

    `retention`: None → `[state_store] default_retention_days` (0 = never), a `timedelta`,
    or `NEVER_EXPIRE`. An expired key reads as absent.
    """

    scope: TaskScope

    def set(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None:
        self._write(key, value, retention)

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
        """Write `new` only if the current value equals `expected` (None = key absent)."""
        return self._compare_and_set(key, expected, new, retention)

    async def aset(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None:
        await asyncio.to_thread(self._write, key, value, retention)


class AssetStateStore(_Accessor):
    """Key/value state of one asset, shared by every task and DAG run that declares it.

    Asset state never expires.
    """

    scope: AssetScope

    def _expiry(self, retention: object, now: float) -> float | None:
        return None

    def _expiry_of(self, expires: float | None) -> float | None:
        return None

    def set(self, key: str, value: JsonValue) -> None:
        self._write(key, value, None)

    def update(self, key: str, fn: Callable[[Any], JsonValue], *, default: Any = None) -> Any:
        """Atomically replace the value with `fn(current or default)`; see TaskStateStore."""
        return self._update(key, fn, default, None)

    def compare_and_set(self, key: str, expected: JsonValue | None, new: JsonValue) -> bool:
        """Write `new` only if the current value equals `expected` (None = key absent)."""
        return self._compare_and_set(key, expected, new, None)

    async def aset(self, key: str, value: JsonValue) -> None:
        await asyncio.to_thread(self._write, key, value, None)
