"""What a stored row means: the offload-reference format, the expiry rule, version tags, and
the shapes listings return (the writer's identity: `taskstate.writers`). Pure functions and
data only."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from taskstate.values import decode_value
from taskstate.writers import Writer

T = TypeVar("T")

# An offloaded value's row holds REF_PREFIX + reference. Encoded JSON never starts with "@",
# so no user value can pass for a reference. (Before schema 2 a reference was a JSON object
# that a user value could mimic; schema migration 2 rewrites those rows.)
REF_PREFIX: Final = "@taskstate-ref:"


GONE: Final = object()  # `StateStore.read_value`: the row was deleted while being read


class Expiry:
    """A named sentinel for an expiry argument (`DEFAULT_EXPIRY`: the configured retention;
    `KEEP_EXPIRY`: the key's current expiry), compared by identity."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


DEFAULT_EXPIRY: Final = Expiry("DEFAULT_EXPIRY")
"""`write(expires_at=DEFAULT_EXPIRY)`: `[state_store] default_retention_days` from now."""
KEEP_EXPIRY: Final = Expiry("KEEP_EXPIRY")
"""`write(expires_at=KEEP_EXPIRY)`: the key's current expiry (the default for a new key)."""


def stored_ref(text: str) -> str | None:
    """The offload reference a stored value holds, or None for an inline value."""
    return text[len(REF_PREFIX) :] if text.startswith(REF_PREFIX) else None


def etag_of(
    text: str, expires_at: float | None, updated_by: str | None, updated_at: float | None
) -> str:
    """An opaque version tag of a stored row. It covers the value, the expiry, the writer and
    the write's time, so every acknowledged write makes a new tag: a rewrite of the same value
    with a new expiry or writer, and A -> B -> A, never pass an `If-Match` on the old tag."""
    version = f"{expires_at!r}\x1f{updated_by}\x1f{updated_at!r}\x1f{text}"
    return hashlib.blake2b(version.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def is_live(expires: float | None, now: float) -> bool:
    """The expiry rule, in its one place: a key is absent from the moment it expires."""
    return expires is None or expires > now


@dataclass(frozen=True)
class StoredEntry:
    """A live key with what the API and UI show beside its value."""

    key: str
    value: Any
    updated_at: float
    expires_at: float | None
    updated_by: Writer | None
    etag: str


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing. `total` counts every match when `exact`; otherwise more matches
    follow this page and `total` is a lower bound (a state listing's `offset + limit + 1`:
    counting every key of a large scope is not what its first page should cost)."""

    items: list[T]
    total: int
    exact: bool = True


def canonical(text: str) -> str:
    """Equality as JSON sees it: key order ignored, `True` != `1`, `1.0` != `1`."""
    return json.dumps(decode_value(text), sort_keys=True, separators=(",", ":"))
