"""Retention cleanup: delete expired task rows in bounded batches. Asset rows never expire.

Each batch is its own short transaction, so writers wait at most one batch for the lock, and
is paced: sized to take ~50 ms (at most `state_cleanup_batch_size` rows), with a pause after each
on a backend whose writes lock the whole store (SQLite). The history pruning and the write
ledger's cleanup that follow are paced the same way. `state_cleanup_batch_size = 0` expires in a
single statement (still bounded: one bound parameter).
`StateStore.cleanup` runs this and then sweeps offloaded objects.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from taskstate.backends.base import HistoryBackend, Stamp, StateBackend

_T = TypeVar("_T")


@dataclass(frozen=True)
class CleanupResult:
    """What a cleanup did, or with `dry_run` would do: expired rows found and deleted, the
    batches it took, and the offloaded orphans and history versions it removed."""

    expired: int  # rows expired when cleanup started
    deleted: int
    batches: int
    longest_batch_s: float
    seconds: float
    dry_run: bool
    offloaded_orphans: int = 0  # objects no row references, removed (or, dry run, found)
    versions_pruned: int = 0  # history versions past the kept number or age
    write_ids_forgotten: int = 0  # write ledger entries past `WRITE_ID_HORIZON_S`

    def with_pruned(self, count: int) -> CleanupResult:
        """This result with `count` history versions pruned."""
        return dataclasses.replace(self, versions_pruned=count)

    def with_forgotten(self, count: int) -> CleanupResult:
        """This result with `count` write ledger entries forgotten."""
        return dataclasses.replace(self, write_ids_forgotten=count)

    def with_orphans(self, count: int) -> CleanupResult:
        """This result with `count` offloaded orphans removed (or found, on a dry run)."""
        return dataclasses.replace(self, offloaded_orphans=count)


# A batch is sized to take about BATCH_TARGET_S, never more rows than the batch size asked
# for: a writer waits for at most about one batch (SQLite: the file's write lock; PostgreSQL:
# the I/O and CPU a big batch takes), and a slow machine deletes fewer rows per statement.
BATCH_TARGET_S = 0.05
FIRST_BATCH = 1_000
SMALLEST_BATCH = 100


def _paced(size: int, took: float, most: int) -> int:
    """The next batch's size: halved after a batch slower than the target, doubled (up to
    `most`) after one faster than half of it."""
    if took > BATCH_TARGET_S:
        return max(min(SMALLEST_BATCH, most), size // 2)
    if took < BATCH_TARGET_S / 2:
        return min(most, size * 2)
    return size


class _Pacer:
    """Runs a cleanup phase's batches: each timed and sized to take about `BATCH_TARGET_S`
    (at most `most` rows or keys), and, on a backend whose writes lock the whole store
    (SQLite), followed by a pause as long as the batch that lets the writers queued behind its
    lock in before the next one takes it."""

    def __init__(self, backend: StateBackend, most: int, first: int) -> None:
        self.backend, self.most, self.size = backend, most, first
        self.longest = 0.0

    def batches(self, batch: Callable[[int], _T]) -> Iterator[_T]:
        """`batch(size)` again and again, each timed; asking for the next one first sizes it
        and, on SQLite, pauses. The caller stops asking when its phase is done (`self.size`
        is still the size of the batch it just got)."""
        while True:
            t0 = time.perf_counter()
            yield batch(self.size)
            took = time.perf_counter() - t0
            self.longest = max(self.longest, took)
            self.size = _paced(self.size, took, self.most)
            if self.backend.store_write_lock:
                # Writers waiting on SQLite's lock poll for it now and then (its busy handler
                # sleeps up to 100 ms between tries): the pause is as long as the batch.
                time.sleep(min(took, 2 * BATCH_TARGET_S))


def delete_expired(
    backend: StateBackend,
    now: float,
    *,
    batch_size: int,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
    history: bool = False,
) -> CleanupResult:
    """Delete every task row that expired at or before `now`. `on_batch(n)` reports progress.
    `history`: each deletion is recorded as an `expire` version."""
    if batch_size < 0:
        raise ValueError(f"batch size must be >= 0 (0 = one statement), got {batch_size}")
    started = time.perf_counter()
    expired = backend.count_expired(now)
    deleted = batches = 0
    pacer = _Pacer(backend, batch_size, min(batch_size, FIRST_BATCH) if batch_size else 0)

    def delete(size: int) -> int:
        if history:
            return cast(HistoryBackend, backend).delete_expired(now, size, Stamp("expire", now))
        return backend.delete_expired(now, size)

    for n in () if dry_run else pacer.batches(delete):
        batches += 1
        deleted += n
        if on_batch is not None:
            on_batch(n)
        if n == 0 or pacer.size == 0 or n < pacer.size:
            break
    longest = pacer.longest
    seconds = time.perf_counter() - started
    return CleanupResult(expired, deleted, batches, longest, seconds, dry_run)


class LiveRefIndex:
    """The offload references of live rows, kept in a temporary SQLite file instead of memory:
    `clean` over a store of any size holds one batch of references at a time. Built once, by
    streaming `refs` into it in batches, before the sweep lists objects (an object written
    after that is younger than the sweep's grace period, so it is never taken for an orphan).
    """

    BATCH = 1000

    def __init__(self, refs: Iterable[str]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="taskstate-clean-")
        self._db = sqlite3.connect(os.path.join(self._dir.name, "refs.db"), isolation_level=None)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("CREATE TABLE refs (ref TEXT PRIMARY KEY) WITHOUT ROWID")
        batch: list[tuple[str]] = []
        for ref in refs:
            batch.append((ref,))
            if len(batch) >= self.BATCH:
                self._add(batch)
                batch = []
        self._add(batch)

    def _add(self, batch: list[tuple[str]]) -> None:
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR IGNORE INTO refs VALUES (?)", batch)
        self._db.execute("COMMIT")

    def among(self, refs: Sequence[str]) -> set[str]:
        """The ones of `refs` that are in the index."""
        found = self._db.execute(
            "SELECT ref FROM refs WHERE ref IN (SELECT value FROM json_each(?))",
            (json.dumps(list(refs)),),
        )
        return {row[0] for row in found}

    def __iter__(self) -> Iterator[str]:
        return (row[0] for row in self._db.execute("SELECT ref FROM refs"))

    def close(self) -> None:
        """Close the database and remove its temporary directory."""
        self._db.close()
        self._dir.cleanup()

    def __enter__(self) -> LiveRefIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Pruning in batches of this many when no cleanup batch size is set: keys for history (a key
# holds about `taskstate_history_versions` versions: the write itself trims the rest), rows
# for the write ledger. Each batch is one short transaction.
PRUNE_BATCH = 1_000
# How long the write ledger keeps a write id (docs/api.md, "Write ids"): far past the client's
# retry window (30 s; a request held by a stopped server may be applied minutes later), so a
# re-sent write always finds its first outcome. A request re-sent after it is a new write: its
# If-Match (an ETag that has long moved on) decides, so it is refused with 412, not applied.
WRITE_ID_HORIZON_S = 24 * 3600


def prune_versions(
    backend: StateBackend,
    *,
    keep: int,
    before: float | None,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete history versions beyond the newest `keep` per key or written before `before`,
    walking the keys in bounded batches (`batch_size` keys each); returns how many went."""
    most = batch_size or PRUNE_BATCH
    pacer = _Pacer(backend, most, min(most, FIRST_BATCH))
    pruned = 0
    after: tuple[str, str] | None = None  # the last key of the batch before

    def batch(size: int) -> int:
        nonlocal after
        n, after = backend.prune_versions(keep, before, size, after)
        return n

    for n in pacer.batches(batch):
        pruned += n
        if on_batch is not None:
            on_batch(n)
        if after is None:
            break
    return pruned


def forget_writes(
    backend: StateBackend,
    now: float,
    *,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete the write ledger's entries older than `WRITE_ID_HORIZON_S`, in bounded batches;
    returns how many went."""
    before = now - WRITE_ID_HORIZON_S
    return _in_batches(
        backend, lambda size: backend.forget_writes(before, size), batch_size, on_batch
    )


def _in_batches(
    backend: StateBackend,
    delete: Callable[[int], int],
    batch_size: int,
    on_batch: Callable[[int], None] | None,
) -> int:
    """Run `delete(size)`, paced, until a batch comes back short; the rows deleted in all."""
    most = batch_size or PRUNE_BATCH
    pacer = _Pacer(backend, most, min(most, FIRST_BATCH))
    total = 0
    for n in pacer.batches(delete):
        total += n
        if on_batch is not None:
            on_batch(n)
        if n < pacer.size:
            break
    return total
