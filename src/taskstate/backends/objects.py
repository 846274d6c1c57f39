"""Values as objects in any fsspec store: the storage layer the offload backend and Airflow 3.3's
`ObjectStorageStateBackend` share (opening the store, writing, reading, listing, removing)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from taskstate.errors import ConfigError
from taskstate.redaction import redact_json_options, redact_url, scrub, url_secrets

COMPRESSIONS = ("none", "gzip")
_GZIP_MAGIC = b"\x1f\x8b"  # JSON text never starts with these bytes, so reads need no flag


def digest(text: str | bytes) -> str:
    """sha256, truncated to 128 bits, as 32 hex digits: one path segment of a reference."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:32]


def parse_storage_options(raw: str | None) -> dict[str, Any]:
    """`[state_store] taskstate_offload_storage_options`: a JSON object, or nothing."""
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError:
        options = None
    if not isinstance(options, dict):
        raise ConfigError(
            "[state_store] taskstate_offload_storage_options must be a JSON object, "
            f"got {redact_json_options(raw)!r}"
        )
    return options


class ObjectFiles:
    """The store under `url`; objects are named by references relative to its root.

    `user` names what needs the store in the error raised when fsspec is not installed."""

    def __init__(self, url: str, options: dict[str, Any], *, user: str) -> None:
        try:
            import fsspec.core
            from fsspec.implementations.local import LocalFileSystem
        except ImportError:
            raise ConfigError(
                f"{user} needs fsspec: pip install 'taskstate[offload]' "
                "(or 'taskstate[s3]' for s3:// URLs)"
            ) from None
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError) as exc:
            reason = scrub(str(exc), url_secrets(url))
            raise ConfigError(
                f"[state_store] taskstate_offload_url = {redact_url(url)!r} cannot be opened: "
                f"{reason}"
            ) from None
        self.url = url
        self.root = root.rstrip("/")
        self._local = isinstance(self.fs, LocalFileSystem)

    def _put_object(self, ref: str, data: bytes, compression: str) -> None:
        """Write a new object; a reader never sees it half-written. Raises OSError."""
        if compression == "gzip":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        path = f"{self.root}/{ref}"
        if self._local:
            self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"  # write aside, rename
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, path)
        else:
            self.fs.pipe_file(path, data)  # object stores replace an object atomically

    def _get_object(self, ref: str) -> str:
        """The object's text, gzip or not. Raises FileNotFoundError, OSError."""
        data: bytes = self.fs.cat_file(f"{self.root}/{ref}")
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
        return data.decode("utf-8")

    def _objects(self, under: str) -> list[tuple[str, float]]:
        """(path, modified time) of every object under the path `under`; unknown counts as now."""
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(under)  # listings of object stores are cached
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(under, detail=True)
        except FileNotFoundError:
            return []
        now = time.time()
        return [(path.rstrip("/"), _modified(info, now)) for path, info in found.items()]

    def _object_batches(self, under: str, size: int) -> Iterator[list[tuple[str, float]]]:
        """`_objects`, listed a directory at a time and handed out `size` at a time: memory
        grows with the batch (and the largest directory, one key's objects), not with the
        number of objects."""
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(under)
        batch: list[tuple[str, float]] = []
        now = time.time()
        try:
            for _, _, files in self.fs.walk(under, detail=True):
                for info in files.values():
                    batch.append((info["name"].rstrip("/"), _modified(info, now)))
                    if len(batch) >= size:
                        yield batch
                        batch = []
        except FileNotFoundError:
            pass
        if batch:
            yield batch

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
