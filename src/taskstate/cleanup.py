"""Retention cleanup: delete expired task rows in bounded batches. Asset rows never expire.

Each batch is its own short transaction, so writers wait at most one batch for the lock;
`state_cleanup_batch_size = 0` is a single statement (still bounded: one bound parameter).
`StateStore.cleanup` runs this and then sweeps offloaded objects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from taskstate.backends.base import StateBackend


@dataclass(frozen=True)
class CleanupResult:
    expired: int  # rows expired when cleanup started
    deleted: int
    batches: int
    longest_batch_s: float
    seconds: float
    dry_run: bool
    offloaded_orphans: int = 0  # objects no row references, removed (or, dry run, found)

    def with_orphans(self, count: int) -> CleanupResult:
        return dataclasses.replace(self, offloaded_orphans=count)


def delete_expired(
    backend: StateBackend,
    now: float,
    *,
    batch_size: int,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> CleanupResult:
    """Delete every task row that expired at or before `now`. `on_batch(n)` reports progress."""
    if batch_size < 0:
        raise ValueError(f"batch size must be >= 0 (0 = one statement), got {batch_size}")
    started = time.perf_counter()
    expired = backend.count_expired(now)
    deleted = batches = 0
    longest = 0.0
    while not dry_run:
        t0 = time.perf_counter()
        n = backend.delete_expired(now, batch_size)
        longest = max(longest, time.perf_counter() - t0)
        batches += 1
        deleted += n
        if on_batch is not None:
            on_batch(n)
        if n == 0 or batch_size == 0 or n < batch_size:
            break
    seconds = time.perf_counter() - started
    return CleanupResult(expired, deleted, batches, longest, seconds, dry_run)
