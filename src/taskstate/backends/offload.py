"""Offload values to object storage (`[workers] state_store_backend`): any fsspec URL.

The row keeps only a reference, `<ns>/<key>/<content>-<nonce>`: sha256 digests (truncated to
128 bits) of the namespace, the key and the stored JSON, and a random nonce. Every object of a
key lives under `<base>/<ns>/<key>/`.

Every write makes a new object, never overwriting one: the object is written before its row,
and a write that then fails (or a `compare_and_set` that does not apply) leaves the row pointing
at the previous object, which is still there — a failed write changes nothing a reader sees.
Because a reference names one write only, the store removes an object as soon as the row that
held it is deleted (`discard`), and a concurrent `set` of the same key can never lose its
just-written object. A key's superseded objects are pruned after each committed `set` once they
are older than `keep_versions_s` (a grace period that outlives any write still in flight), and
`taskstate clean` sweeps the rest: objects no row references (expired rows, rows deleted by
other means), again only past the grace period.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import re
import time
import uuid
from datetime import datetime
from typing import Any

from taskstate.backends.base import WorkerStateBackend
from taskstate.errors import BackendError, ConfigError, OffloadedValueMissingError
from taskstate.redaction import redact_json_options, redact_url, scrub, url_secrets
from taskstate.settings import Settings

COMPRESSIONS = ("none", "gzip")
_GZIP_MAGIC = b"\x1f\x8b"  # JSON text never starts with these bytes, so reads need no flag
# The nonce is absent from references written before schema 2 (content-addressed only).
_REF = re.compile(r"[0-9a-f]{32}/[0-9a-f]{32}/[0-9a-f]{32}(-[0-9a-f]{16})?")


def _digest(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:32]


class OffloadBackend(WorkerStateBackend):
    """Values in object storage, references in the database.

    `url`: base location, e.g. `file:///data/state` or `s3://bucket/state`.
    `threshold`: values of at most this many bytes of JSON stay inline; None offloads all
    (Airflow's behaviour). `compression`: "none" or "gzip". `storage_options`: passed to fsspec
    (e.g. `{"endpoint_url": ...}` for S3-compatible stores).
    """

    def __init__(
        self,
        url: str,
        *,
        threshold: int | None = None,
        compression: str = "none",
        storage_options: dict[str, Any] | None = None,
        keep_versions_s: float = 3600.0,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ConfigError(
                f"[state_store] taskstate_offload_compression must be one of "
                f"{', '.join(COMPRESSIONS)}, got {compression!r}"
            )
        try:
            import fsspec.core
            from fsspec.implementations.local import LocalFileSystem
        except ImportError:
            raise ConfigError(
                "offloading needs fsspec: pip install 'taskstate[offload]' "
                "(or 'taskstate[s3]' for s3:// URLs)"
            ) from None
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError) as exc:
            reason = scrub(str(exc), url_secrets(url))
            raise ConfigError(
                f"[state_store] taskstate_offload_url = {redact_url(url)!r} cannot be opened: "
                f"{reason}"
            ) from None
        self.url = url
        self.root = root.rstrip("/")
        self.threshold = threshold
        self.compression = compression
        self.keep_versions_s = keep_versions_s
        self._local = isinstance(self.fs, LocalFileSystem)

    @classmethod
    def from_settings(cls, settings: Settings) -> OffloadBackend:
        if not settings.offload_url:
            raise ConfigError(
                "[workers] state_store_backend is OffloadBackend but [state_store] "
                "taskstate_offload_url is not set; set it to e.g. file:///data/state or "
                "s3://bucket/state"
            )
        options: Any = {}
        if settings.offload_storage_options:
            try:
                options = json.loads(settings.offload_storage_options)
            except json.JSONDecodeError:
                options = None
            if not isinstance(options, dict):
                raise ConfigError(
                    "[state_store] taskstate_offload_storage_options must be a JSON object, "
                    f"got {redact_json_options(settings.offload_storage_options)!r}"
                )
        return cls(
            settings.offload_url,
            threshold=settings.offload_threshold,
            compression=settings.offload_compression,
            storage_options=options,
        )

    def __repr__(self) -> str:
        return f"OffloadBackend({redact_url(self.url)!r})"

    # -- the worker-backend contract --------------------------------------------------------

    def serialize_to_ref(self, namespace: str, key: str, value: str) -> str:
        data = value.encode("utf-8")
        ref = f"{_digest(namespace)}/{_digest(key)}/{_digest(data)}-{uuid.uuid4().hex[:16]}"
        if self.compression == "gzip":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        path = f"{self.root}/{ref}"
        try:
            if self._local:
                # A reader must never see a half-written file: write aside, rename.
                self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
                tmp = f"{path}.{uuid.uuid4().hex}.tmp"
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, path)
            else:
                self.fs.pipe_file(path, data)  # object stores replace an object atomically
        except OSError as exc:
            raise BackendError(f"cannot write the offloaded value to {self.url}: {exc}") from exc
        return ref

    def deserialize_from_ref(self, ref: str) -> str:
        if not _REF.fullmatch(ref):
            raise BackendError(f"not a taskstate offload reference: {ref!r}")
        try:
            data: bytes = self.fs.cat_file(f"{self.root}/{ref}")
        except FileNotFoundError:
            raise OffloadedValueMissingError(
                f"the offloaded value {ref} is missing from {self.url}; it was deleted outside "
                "taskstate, or the base URL changed"
            ) from None
        except OSError as exc:
            raise BackendError(f"cannot read the offloaded value from {self.url}: {exc}") from exc
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
        return data.decode("utf-8")

    def discard(self, refs: list[str]) -> None:
        self._remove_paths([f"{self.root}/{ref}" for ref in refs if _REF.fullmatch(ref)])

    def committed(self, namespace: str, key: str, ref: str) -> None:
        """`ref` is now in the database: prune the key's older objects past the grace period."""
        keep = f"{self.root}/{ref}"
        stale = [
            path
            for path, age in self._objects(f"{self.root}/{_digest(namespace)}/{_digest(key)}")
            if path != keep and age >= self.keep_versions_s
        ]
        self._remove_paths(stale)

    # -- sweeping -------------------------------------------------------------------------------

    def sweep(self, live_refs: set[str], *, dry_run: bool = False) -> int:
        """Remove objects no live reference names, older than the grace period; returns how many."""
        orphans = [
            path
            for path, age in self._objects(self.root)
            if age >= self.keep_versions_s and path[len(self.root) + 1 :] not in live_refs
        ]
        if not dry_run:
            self._remove_paths(orphans)
        return len(orphans)

    def _objects(self, under: str) -> list[tuple[str, float]]:
        """(path, age in seconds) of every object under `under`; unknown age counts as new."""
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(under)  # listings of object stores are cached
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(under, detail=True)
        except FileNotFoundError:
            return []
        now = time.time()
        return [(path.rstrip("/"), now - _modified(info, now)) for path, info in found.items()]

    def _remove_paths(self, paths: list[str]) -> None:
        """Remove objects; one already gone (another cleaner got there first) is fine."""
        if not self._local:
            if paths:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm(paths)  # object stores delete in bulk, missing keys included
            return
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)


def _modified(info: dict[str, Any], now: float) -> float:
    stamp = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    try:
        value = float(stamp) if stamp is not None else math.nan
    except (TypeError, ValueError):
        value = math.nan
    return now if math.isnan(value) else value
