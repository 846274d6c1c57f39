"""Export and import as JSON lines: backups, and moving state between backends.

One line per key: {"scope": "task", "dag_id", "run_id", "task_id", "map_index", "key",
"value", "expires_at"} or {"scope": "asset", "asset", "key", "value"}. Values are exported
resolved (offload references followed), so a file moves between differently configured stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taskstate.errors import TaskStateError
from taskstate.scope import META_PREFIX, AssetScope, TaskScope, parse_namespace
from taskstate.store import StateStore, _Accessor


class ImportFormatError(TaskStateError, ValueError):
    """A line of an import file is not a taskstate export line."""


def export_lines(store: StateStore, prefix: str = "") -> Iterator[str]:
    for row in store.backend.scan(prefix):
        if row.namespace.startswith(META_PREFIX):
            continue
        scope = parse_namespace(row.namespace)
        value = store.load_value(row.value)
        record: dict[str, Any]
        if isinstance(scope, TaskScope):
            record = {
                "scope": "task",
                "dag_id": scope.dag_id,
                "run_id": scope.run_id,
                "task_id": scope.task_id,
                "map_index": scope.map_index,
                "key": row.key,
                "value": value,
                "expires_at": row.expires_at,
            }
        else:
            record = {"scope": "asset", "asset": scope.identity, "key": row.key, "value": value}
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ImportResult:
    written: int
    skipped_expired: int


def import_lines(store: StateStore, lines: Iterable[str]) -> ImportResult:
    """Validate every line first; write only if all are valid (bad input writes nothing)."""
    now = store.clock()
    planned: list[tuple[_Accessor, str, Any, float | None]] = []
    skipped = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            accessor, expires = _accessor_for(store, record)
            key, value = record["key"], record["value"]
            accessor._stored_text(key, value)  # every rule a normal write applies
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ImportFormatError(f"line {number}: {detail}; nothing was imported") from None
        if expires is not None and expires <= now:
            skipped += 1
            continue
        planned.append((accessor, key, value, expires))
    for accessor, key, value, expires in planned:
        accessor._restore(key, value, expires)
    return ImportResult(len(planned), skipped)


def _accessor_for(store: StateStore, record: Any) -> tuple[_Accessor, float | None]:
    if not isinstance(record, dict):
        raise ValueError("each line must be a JSON object")
    if record.get("scope") == "task":
        scope = TaskScope(
            record["dag_id"], record["run_id"], record["task_id"], record.get("map_index", -1)
        )
        expires = record.get("expires_at")
        if expires is not None and not isinstance(expires, (int, float)):
            raise ValueError(f"expires_at must be epoch seconds or null, got {expires!r}")
        return store.task_state(scope), expires
    if record.get("scope") == "asset":
        return store.asset_state(AssetScope(name=record["asset"])), None
    raise ValueError(f'"scope" must be "task" or "asset", got {record.get("scope")!r}')
