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

import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from taskstate.backends.base import LiveRefs, WorkerStateBackend
from taskstate.backends.objects import COMPRESSIONS, ObjectFiles, digest, parse_storage_options
from taskstate.errors import BackendError, ConfigError, OffloadedValueMissingError
from taskstate.redaction import redact_url
from taskstate.settings import Settings

SWEEP_BATCH = 1000  # objects listed, checked and removed at a time by `sweep_orphans`
# The nonce is absent from references written before schema 2 (content-addressed only).
_REF = re.compile(r"[0-9a-f]{32}/[0-9a-f]{32}/[0-9a-f]{32}(-[0-9a-f]{16})?")


class OffloadBackend(WorkerStateBackend, ObjectFiles):
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
        ObjectFiles.__init__(self, url, storage_options or {}, user="offloading")
        self.threshold = threshold
        self.compression = compression
        self.keep_versions_s = keep_versions_s

    @classmethod
    def from_settings(cls, settings: Settings) -> OffloadBackend:
        """The offload backend the `taskstate_offload_*` options describe; ConfigError when
        `taskstate_offload_url` is not set."""
        if not settings.offload_url:
            raise ConfigError(
                "[workers] state_store_backend is OffloadBackend but [state_store] "
                "taskstate_offload_url is not set; set it to e.g. file:///data/state or "
                "s3://bucket/state"
            )
        return cls(
            settings.offload_url,
            threshold=settings.offload_threshold,
            compression=settings.offload_compression,
            storage_options=parse_storage_options(settings.offload_storage_options),
        )

    def __repr__(self) -> str:
        return f"OffloadBackend({redact_url(self.url)!r})"

    # -- the worker-backend contract --------------------------------------------------------

    def serialize_to_ref(self, namespace: str, key: str, value: str) -> str:
        """Put a value's JSON text in object storage as a new object; its reference (the row
        stores it). BackendError when the write fails."""
        data = value.encode("utf-8")
        ref = f"{digest(namespace)}/{digest(key)}/{digest(data)}-{uuid.uuid4().hex[:16]}"
        try:
            self._put_object(ref, data, self.compression)
        except OSError as exc:
            raise BackendError(f"cannot write the offloaded value to {self.url}: {exc}") from exc
        return ref

    def deserialize_from_ref(self, ref: str) -> str:
        """The JSON text an object holds; OffloadedValueMissingError when it is gone,
        BackendError when unreadable."""
        if not _REF.fullmatch(ref):
            raise BackendError(f"not a taskstate offload reference: {ref!r}")
        try:
            return self._get_object(ref)
        except FileNotFoundError:
            raise OffloadedValueMissingError(
                f"the offloaded value {ref} is missing from {self.url}; it was deleted outside "
                "taskstate, or the base URL changed"
            ) from None
        except OSError as exc:
            raise BackendError(f"cannot read the offloaded value from {self.url}: {exc}") from exc

    def discard(self, refs: list[str]) -> None:
        """Remove these objects (references not of this backend's shape are skipped; missing
        objects are no error)."""
        self._remove_paths([f"{self.root}/{ref}" for ref in refs if _REF.fullmatch(ref)])

    def committed(self, namespace: str, key: str, ref: str) -> None:
        """`ref` is now in the database: prune the key's older objects past the grace period."""
        keep, cutoff = f"{self.root}/{ref}", time.time() - self.keep_versions_s
        stale = [
            path
            for path, modified in self._objects(f"{self.root}/{digest(namespace)}/{digest(key)}")
            if path != keep and modified <= cutoff
        ]
        self._remove_paths(stale)

    # -- sweeping -------------------------------------------------------------------------------

    def sweep(self, live_refs: set[str], *, dry_run: bool = False) -> int:
        """The former interface, for a caller that holds the references in a set."""
        return self.sweep_orphans(_Refs(live_refs), dry_run=dry_run)

    def sweep_orphans(
        self, live: LiveRefs, *, dry_run: bool = False, batch_size: int = SWEEP_BATCH
    ) -> int:
        """Remove objects no live row references, older than the grace period; returns how
        many. Objects are listed `batch_size` at a time and checked against the database's
        references batch by batch: memory is bounded by the batch."""
        cutoff = time.time() - self.keep_versions_s
        start = len(self.root) + 1
        removed = 0
        for batch in self._object_batches(self.root, batch_size):
            old = [path for path, modified in batch if modified <= cutoff]
            referenced = live.among([path[start:] for path in old])
            orphans = [path for path in old if path[start:] not in referenced]
            if not dry_run:
                self._remove_paths(orphans)
            removed += len(orphans)
        return removed


class _Refs:
    """`LiveRefs` over a set."""

    def __init__(self, refs: set[str]) -> None:
        self.refs = refs

    def among(self, refs: Sequence[str]) -> set[str]:
        return self.refs.intersection(refs)

    def __iter__(self) -> Iterator[str]:
        return iter(self.refs)
