"""`ObjectStorageStateBackend`: taskstate's object-storage offloading as Airflow 3.3+'s native
`[workers] state_store_backend`, and its cleanup (`taskstate clean --airflow-offload`).

Airflow's worker accessors call it (airflow/sdk/execution_time/context.py): `set` stores the value
through `serialize_*_to_ref` and writes `{"__airflow_state_ref__": ref}` to its database; `get`
follows the reference; `delete`/`clear` remove the row first, then call `delete(scope, key)` /
`clear(scope)` here. Airflow asks for references that are deterministic per (scope, key) so
that `delete`/`clear` can find the objects without the row. Taken literally (one object per
key, overwritten in place) that loses data when a `set` races a `delete` of the same key: the
deleter removes the row, the setter rewrites the object and commits its row, the deleter
removes the object — a committed row now points at nothing (taskstate's own offload backend
had the same race, issue 11). So:

- every write is a new object, `<sha(scope)>/<sha(key)>/<uuid>`: deterministic per (scope, key)
  down to the folder, which is all `delete`/`clear` need, and never overwritten, so no write
  can change what another committed row references;
- `delete`/`clear` remove only objects of that key (scope) older than the grace period
  (`keep_versions_s`, default an hour): a row committed since the deleter removed its row
  references an object written within the last moments, which stays;
- everything else — superseded versions, objects of rows deleted through Airflow's REST API or
  UI (which never call a worker backend), objects of expired rows — is removed by
  `taskstate clean --airflow-offload`: Airflow's own cleanup deletes the expired rows first,
  then every object no row references, past the same grace period, goes.

Configuration is taskstate's offload settings (Airflow builds the backend with no arguments):
`[state_store] taskstate_offload_url`, `taskstate_offload_compression`,
`taskstate_offload_storage_options`. Values follow taskstate's value rules (nested NaN, tuples,
... are refused with the path), since this is the one place the worker sees the value.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from taskstate.backends.objects import ObjectFiles, digest, parse_storage_options
from taskstate.errors import BackendError, ConfigError
from taskstate.redaction import redact_url
from taskstate.scope import AssetScope, TaskScope
from taskstate.settings import Settings
from taskstate.values import decode_value, encode_value

REF_KEY = "__airflow_state_ref__"  # Airflow's wrapper around a worker backend's reference
_REF = re.compile(r"[0-9a-f]{32}/[0-9a-f]{32}/[0-9a-f]{32}")


def _namespace(scope: Any) -> str:
    """Airflow's TaskScope / AssetScope (worker side: no asset_id) as taskstate's namespace."""
    if hasattr(scope, "task_id"):
        map_index = scope.map_index if scope.map_index is not None else -1
        return TaskScope(scope.dag_id, scope.run_id, scope.task_id, map_index).namespace
    return AssetScope(name=scope.name or None, uri=scope.uri or None).namespace


class ObjectStorageStateBackend(ObjectFiles):
    """Values in object storage (any fsspec URL), references in Airflow 3.3's database.

    `[workers] state_store_backend = taskstate.airflow.ObjectStorageStateBackend`
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        compression: str | None = None,
        storage_options: dict[str, Any] | None = None,
        keep_versions_s: float = 3600.0,
    ) -> None:
        if url is None or compression is None or storage_options is None:
            settings = Settings.load()
            url = url or settings.offload_url
            compression = compression or settings.offload_compression
            if storage_options is None:
                storage_options = parse_storage_options(settings.offload_storage_options)
        if not url:
            raise ConfigError(
                "[workers] state_store_backend is taskstate.airflow.ObjectStorageStateBackend "
                "but [state_store] taskstate_offload_url is not set; set it to e.g. "
                "s3://bucket/airflow-state or file:///shared/state"
            )
        ObjectFiles.__init__(self, url, storage_options, user="ObjectStorageStateBackend")
        self.compression = compression
        self.keep_versions_s = keep_versions_s

    def __repr__(self) -> str:
        return f"ObjectStorageStateBackend({redact_url(self.url)!r})"

    # -- Airflow's worker-backend contract ---------------------------------------------------

    def serialize_task_state_store_to_ref(self, *, value: Any, key: str, scope: Any) -> str:
        """Put a task's value in object storage; the reference Airflow keeps in its database. A
        new object per write, so a reference never names a changed value."""
        return self._put(_namespace(scope), key, value)

    def serialize_asset_state_store_to_ref(self, *, value: Any, key: str, scope: Any) -> str:
        """Put an asset's value in object storage; the reference Airflow keeps in its database."""
        return self._put(_namespace(scope), key, value)

    def deserialize_task_state_store_from_ref(self, stored: str) -> Any:
        """The value a reference names; BackendError when its object is missing or unreadable."""
        return decode_value(self._read(stored))

    def deserialize_asset_state_store_from_ref(self, stored: str) -> Any:
        """The value a reference names; BackendError when its object is missing or unreadable."""
        return decode_value(self._read(stored))

    def delete(self, scope: Any, key: str, *, session: Any = None) -> None:
        """Remove a deleted key's objects older than the grace period (`keep_versions_s`: a
        write in flight keeps its new object)."""
        self._remove_old(f"{self.root}/{digest(_namespace(scope))}/{digest(key)}")

    def clear(self, scope: Any, *, all_map_indices: bool = False, session: Any = None) -> None:
        """Remove the scope's objects older than the grace period."""
        # Airflow's workers clear their own map index only; all_map_indices is for its UI/CLI,
        # whose objects the sweep collects.
        self._remove_old(f"{self.root}/{digest(_namespace(scope))}")

    async def adelete(self, scope: Any, key: str, *, session: Any = None) -> None:
        """`delete` in a worker thread."""
        await asyncio.to_thread(self.delete, scope, key)

    async def aclear(
        self, scope: Any, *, all_map_indices: bool = False, session: Any = None
    ) -> None:
        """`clear` in a worker thread."""
        await asyncio.to_thread(self.clear, scope)

    # -- storage ----------------------------------------------------------------------------

    def _put(self, namespace: str, key: str, value: Any) -> str:
        ref = f"{digest(namespace)}/{digest(key)}/{uuid.uuid4().hex}"
        try:
            self._put_object(ref, encode_value(value).encode("utf-8"), self.compression)
        except OSError as exc:
            raise BackendError(f"cannot write the state value to {self.url}: {exc}") from exc
        return ref

    def _read(self, ref: str) -> str:
        if not _REF.fullmatch(ref):
            raise BackendError(f"not an ObjectStorageStateBackend reference: {ref!r}")
        try:
            return self._get_object(ref)
        except FileNotFoundError:
            raise BackendError(
                f"the state value {ref} is missing from {self.url}: it was deleted outside "
                "taskstate, or [state_store] taskstate_offload_url changed"
            ) from None
        except OSError as exc:
            raise BackendError(f"cannot read the state value from {self.url}: {exc}") from exc

    def objects(self, under: str | None = None) -> list[tuple[str, float]]:
        """(ref, modified time) of every object under `under` (default: all); unknown = now."""
        start = len(self.root) + 1
        return [(path[start:], modified) for path, modified in self._objects(under or self.root)]

    def cutoff(self) -> float:
        """Objects modified before this are past the grace period. Taken when an operation
        starts, so a stall inside it (listing a large prefix) cannot age a new object into it."""
        return time.time() - self.keep_versions_s

    def _remove_old(self, under: str) -> None:
        cutoff = self.cutoff()
        self.remove([ref for ref, modified in self.objects(under) if modified < cutoff])

    def remove(self, refs: list[str]) -> None:
        """Remove these objects (missing ones are no error)."""
        self._remove_paths([f"{self.root}/{ref}" for ref in refs])


# -- taskstate clean --airflow-offload ----------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """What `taskstate clean --airflow-offload` found: objects listed, removed (or, in a dry
    run, that would be) and kept because they are younger than the grace period."""

    objects: int  # listed
    removed: int  # (dry run: would remove) unreferenced and older than the grace period
    kept_young: int  # unreferenced but younger: a write may be in flight


def _live_refs() -> set[str]:
    """The references Airflow's live task rows and its asset rows hold (read through its ORM).

    An expired task row counts as gone, as everywhere in taskstate (`sweep` has Airflow's
    cleanup delete them first; a dry run counts their objects as what it would remove).
    """
    from airflow._shared.timezones import timezone
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session

    now = timezone.utcnow()
    task_live = TaskStateStoreModel.expires_at.is_(None) | (TaskStateStoreModel.expires_at >= now)
    refs: set[str] = set()
    with create_session() as session:
        for model, live in ((TaskStateStoreModel, task_live), (AssetStateStoreModel, True)):
            rows = session.query(model.value).filter(model.value.contains(REF_KEY), live)
            for (text,) in rows.yield_per(1000):
                with contextlib.suppress(ValueError):
                    value = json.loads(text)
                    if isinstance(value, dict) and isinstance(value.get(REF_KEY), str):
                        refs.add(value[REF_KEY])
    return refs


def sweep(backend: ObjectStorageStateBackend, *, dry_run: bool = False) -> SweepResult:
    """Expired rows out (Airflow's own cleanup), then objects no row references, past grace."""
    from airflow.state import get_state_backend

    cutoff = backend.cutoff()
    if not dry_run:
        get_state_backend().cleanup()  # Airflow's retention: `expires_at < now` task rows
    listed = backend.objects()  # listed before the refs are read: a newer object is young
    live = _live_refs()
    unreferenced = [(ref, modified) for ref, modified in listed if ref not in live]
    old = [ref for ref, modified in unreferenced if modified < cutoff]
    if not dry_run:
        backend.remove(old)
    return SweepResult(
        objects=len(listed),
        removed=len(old),
        kept_young=len(unreferenced) - len(old),
    )


def clean_airflow_offload(*, dry_run: bool = False) -> SweepResult:
    """`taskstate clean --airflow-offload`: the configured ObjectStorageStateBackend, swept."""
    from taskstate.airflow.versions import native_store_available
    from taskstate.settings import setting

    if not native_store_available():
        raise ConfigError(
            "--airflow-offload cleans Airflow 3.3+'s [workers] state_store_backend; run it "
            "where Airflow 3.3+ is installed"
        )
    configured = setting("worker_backend") or ""
    if configured.rpartition(".")[2] != ObjectStorageStateBackend.__name__:
        raise ConfigError(
            f"[workers] state_store_backend is {configured or 'unset'}, not "
            "taskstate.airflow.ObjectStorageStateBackend: nothing of taskstate's to clean"
        )
    return sweep(ObjectStorageStateBackend(), dry_run=dry_run)
