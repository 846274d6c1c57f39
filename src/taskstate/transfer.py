"""Export and import as JSON lines: backups, and moving state between backends.

One line per key: {"scope": "task", "dag_id", "run_id", "task_id", "map_index", "key",
"value", "expires_at", "updated_at", "updated_by"} or {"scope": "asset", "asset", "key", "value",
"updated_at", "updated_by"}; times are epoch seconds, `updated_by` a writer record
(`taskstate.writers`) or null when unknown. Values are exported resolved (offload references
followed), so a file moves between differently configured stores.

`export --with-history` adds, after the keys, one line per kept version of every key (deleted
keys' too), each key's oldest first: a key line's fields plus `"version"` and `"op"`, with
`"value": null` for a deletion. An import writes them in the same transaction as the keys,
before each key's own `import` version (docs/history.md, "Export and import").

An import keeps each line's `updated_at` and `updated_by`, so a restored backup still says who
wrote each key and when. A line from an older file, without them, is stamped now and
`{"kind": "api", "via": "import", "user": ...}`.

An import is all or nothing: every line is parsed and checked by the store's rules, values are
offloaded, then one backend transaction writes every row (writers wait for it). A failure at
any point writes nothing and removes what was uploaded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taskstate.errors import BackendError, TaskStateError
from taskstate.history import Version
from taskstate.scope import AssetScope, TaskScope
from taskstate.store import ImportEntry, ImportVersion, StateStore
from taskstate.stored import is_live
from taskstate.writers import KINDS, Writer, import_writer


class ImportFormatError(TaskStateError, ValueError):
    """A line of an import file is not a taskstate export line, or breaks a rule."""


def export_lines(store: StateStore, prefix: str = "") -> Iterator[str]:
    """The live keys under `prefix`."""
    for scope, entry in store.entries(prefix):
        record = _record(scope, entry.key, entry.value, entry.expires_at)
        record["updated_at"] = entry.updated_at
        record["updated_by"] = entry.updated_by
        yield _line(record)


def version_lines(store: StateStore, prefix: str = "") -> Iterator[str]:
    """Every kept version of every key under `prefix` (`export --with-history`, after the
    keys)."""
    for scope, key, version in store.kept_versions(prefix):
        yield _line(_version_record(scope, key, version))


def _record(scope: TaskScope | AssetScope, key: str, value: Any, expires: float | None) -> Any:
    if isinstance(scope, TaskScope):
        return {
            "scope": "task",
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "task_id": scope.task_id,
            "map_index": scope.map_index,
            "key": key,
            "value": value,
            "expires_at": expires,
        }
    return {"scope": "asset", "asset": scope.identity, "key": key, "value": value}


def _version_record(scope: TaskScope | AssetScope, key: str, v: Version) -> dict[str, Any]:
    expires = None if v.expires_at is None else v.expires_at.timestamp()
    record: dict[str, Any] = _record(scope, key, v.value, expires)
    record.update(version=v.version, op=v.op, updated_at=v.updated_at.timestamp())
    record["updated_by"] = v.updated_by
    return record


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ImportResult:
    """What an import did: keys written, lines skipped as expired, keys kept because they
    existed (`replace=False`), and version lines read."""

    written: int
    skipped_expired: int
    kept_existing: int
    versions: int = 0  # version lines read (`export --with-history`)


def import_lines(store: StateStore, lines: Iterable[str], *, replace: bool = True) -> ImportResult:
    """Import every line or none. `replace=False` keeps keys that already exist."""
    now = store.clock()
    at = {"line": 0, "skipped": 0, "planned": 0, "versions": 0}
    unattributed = import_writer()  # for lines of older files, which name no writer

    def records() -> Iterator[ImportEntry | ImportVersion]:
        for number, line in enumerate(lines, 1):
            at["line"] = number
            if not line.strip():
                continue
            record = json.loads(line)
            if isinstance(record, dict) and "version" in record:
                at["versions"] += 1
                yield _version(record, unattributed)  # history: kept whatever its expiry
                continue
            scope, key, value, expires, updated_at, writer = _parse(record, unattributed)
            if not is_live(expires, now):
                at["skipped"] += 1
                continue
            at["planned"] += 1
            yield scope, key, value, expires, updated_at, writer

    try:
        written = store.import_entries(records(), replace=replace)
    except BackendError as exc:
        raise BackendError(f"{exc}; nothing was imported") from exc
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            f"line {at['line'] + 1}: not UTF-8 text ({exc.reason}); nothing was imported"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"missing field {exc}" if type(exc) is KeyError else str(exc)
        raise ImportFormatError(f"line {at['line']}: {detail}; nothing was imported") from None
    return ImportResult(written, at["skipped"], at["planned"] - written, at["versions"])


def _version(record: dict[str, Any], unattributed: Writer) -> ImportVersion:
    """A version line of `export --with-history`."""
    scope, key, value, expires, updated_at, writer = _parse(record, unattributed)
    if updated_at is None:
        raise ValueError("a version line needs its updated_at")
    if type(record["version"]) is not int or type(record.get("op")) is not str:
        raise ValueError("version must be an integer and op a string")
    return ImportVersion(scope, key, record["version"], value, expires, updated_at, writer,
                         record["op"])  # fmt: skip


def _parse(record: Any, unattributed: Writer) -> ImportEntry:
    if not isinstance(record, dict):
        raise ValueError("each line must be a JSON object")
    kind = record.get("scope")
    if kind == "task":
        scope: TaskScope | AssetScope = TaskScope(
            record["dag_id"], record["run_id"], record["task_id"], record.get("map_index", -1)
        )
        expires = _epoch(record, "expires_at")
    elif kind == "asset":
        scope, expires = AssetScope(name=record["asset"]), None
    else:
        raise ValueError(f'"scope" must be "task" or "asset", got {kind!r}')
    writer = record.get("updated_by", unattributed)
    if writer is not None and not (isinstance(writer, dict) and writer.get("kind") in KINDS):
        raise ValueError(
            f"updated_by must be null or a writer whose kind is one of {', '.join(KINDS)}, "
            f"got {writer!r}"
        )
    return scope, record["key"], record["value"], expires, _epoch(record, "updated_at"), writer


def _epoch(record: dict[str, Any], field: str) -> float | None:
    value = record.get(field)
    if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
        raise ValueError(f"{field} must be epoch seconds or null, got {value!r}")
    return value
