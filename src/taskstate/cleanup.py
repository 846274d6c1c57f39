"""Retention cleanup: delete expired task rows in bounded batches. Asset rows never expire.

Each batch is its own short transaction, so writers wait at most one batch for the lock;
`state_cleanup_batch_size = 0` is a single statement (still bounded: one bound parameter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from taskstate.store import StateStore


@dataclass(frozen=True)
class CleanupResult:
    expired: int  # rows expired when cleanup started
    deleted: int
    batches: int
    longest_batch_s: float
    seconds: float
    dry_run: bool


def clean(
    store: StateStore,
    *,
    batch_size: int | None = None,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> CleanupResult:
    """Delete every task row that expired at or before now. `on_batch(n)` reports progress."""
    size = store.settings.state_cleanup_batch_size if batch_size is None else batch_size
    if size < 0:
        raise ValueError(f"batch size must be >= 0 (0 = one statement), got {size}")
    backend = store.backend
    now = store.clock()
    started = time.perf_counter()
    expired = backend.count_expired(now)
    deleted = batches = 0
    longest = 0.0
    while not dry_run:
        t0 = time.perf_counter()
        n = backend.delete_expired(now, size)
        longest = max(longest, time.perf_counter() - t0)
        batches += 1
        deleted += n
        if on_batch is not None:
            on_batch(n)
        if n == 0 or size == 0 or n < size:
            break
    return CleanupResult(expired, deleted, batches, longest, time.perf_counter() - started, dry_run)
