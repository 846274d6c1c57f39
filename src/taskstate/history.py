"""State history: what a key held before, and putting it back (docs/history.md).

Each write that changes a key appends a `Version` in the same transaction (the backend does it,
given a `Stamp`); `[state_store] taskstate_history_versions` bounds how many are kept per key
and `taskstate_history_retention_days` how old they may be. Version numbers come from a per-key
high-water mark that outlives pruning and deletion (on SQLite: the key's newest kept version, or
its mark once pruning took every version), so a number is never reused.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from taskstate.errors import NaiveDatetimeError

#: Every operation a version can record.
OPS = ("set", "update", "compare_and_set", "delete", "clear", "expire", "import", "restore")
#: The operations whose version may hold no value (a deletion; `restore`: of a deletion).
VALUELESS_OPS = ("delete", "clear", "expire", "restore")


@dataclass(frozen=True)
class Version:
    """One kept version of a key, as `history()` returns it (newest first).

    `value` is None for a deletion (`delete`, `clear`, `expire`); `updated_by` is the same dict
    as the API's `last_updated_by` (None: unknown)."""

    version: int
    value: Any
    op: str
    updated_at: datetime
    updated_by: dict[str, Any] | None
    expires_at: datetime | None


def instant(as_of: object) -> float:
    """`as_of` (an aware datetime) as epoch seconds; anything else is a typed TypeError."""
    if not isinstance(as_of, datetime):
        raise NaiveDatetimeError(
            f"as_of must be a timezone-aware datetime, got {type(as_of).__name__}"
        )
    if as_of.tzinfo is None or as_of.utcoffset() is None:
        raise NaiveDatetimeError(
            f"as_of={as_of.isoformat()} has no time zone; pass an aware datetime, e.g. "
            "datetime(..., tzinfo=timezone.utc)"
        )
    return as_of.timestamp()


def utc(seconds: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime (None stays None)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


def writer_dict(text: str | None) -> dict[str, Any] | None:
    """A stored writer (its JSON text) as a dict (None: unknown writer), a new one each call.
    The rows of a page mostly share their writer (one task wrote them), so a flat writer (every
    writer taskstate makes) is parsed once per distinct text and copied: 0.3 against 3 µs."""
    if text is None:
        return None
    writer, flat = _parsed_writer(text)
    return dict(writer) if flat else dict(json.loads(text))


@functools.lru_cache(maxsize=256)
def _parsed_writer(text: str) -> tuple[dict[str, Any], bool]:
    """A writer's text parsed, and whether a shallow copy of it is a copy (no nested value)."""
    writer = json.loads(text)
    return writer, all(not isinstance(v, (dict, list)) for v in writer.values())
