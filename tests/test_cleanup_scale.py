"""`taskstate clean` on many expired task rows, on both built-in backends, via the CLI. The
million-row figure is bench/cleanup_scale.py's (it asserts every row deleted too): here enough
rows for several batches and a remainder, which is what the claims below need."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.expired_rows import KEPT_EACH, load

from taskstate import StateStore, TaskScope, cleanup
from taskstate.settings import Settings

EXPIRED = 55_000  # at least 5 full batches of 10,000 and a partial one


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_deletes_expired_rows_in_batches_and_keeps_the_rest(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if kind == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    load(url, EXPIRED, time.time())
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "--url", url, "clean", "--batch-size", "10000",
         "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["expired"], result["deleted"]) == (EXPIRED, EXPIRED)
    # Paced: batches start at 1,000 rows and grow while fast, never past 10,000.
    assert result["batches"] >= EXPIRED // 10000 + 1
    with StateStore(url, settings=Settings()) as store:
        left = sorted(row.key.rstrip("0123456789") for row in store.backend.scan())
    assert left == ["fresh"] * KEPT_EACH + ["key"] * KEPT_EACH + ["never"] * KEPT_EACH


STALL_ROWS, STALL_BATCH = 60_000, 10_000  # 6 full batches and an empty last one
# A wait for the writer to progress between two batches that only a lock held across batches
# (the writer never gets in) can exhaust: not a latency bound.
PROGRESS_WAIT_S = 120


def _write_while(url: str, stop: Any, writes: Any, report: Any) -> None:
    """`set` task state in a loop until told to stop, counting the writes in `writes`."""
    with StateStore(url, settings=Settings()) as store:
        acc = store.task_state(TaskScope("writer", "run", "task"))
        n = 0
        while not stop.is_set():
            acc.set(f"k{n % 100}", {"n": n})
            n += 1
            writes.value = n
        report.put((n, acc.get(f"k{(n - 1) % 100}")))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_in_batches_does_not_stall_a_concurrent_writer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """While cleanup deletes 60,000 expired rows in batches of 10,000, a writer in another
    process keeps writing: after each batch (its transaction over), cleanup waits until the
    writer has committed another write, which it can only do if no lock outlives a batch."""
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if kind == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    load(url, STALL_ROWS, time.time())
    ctx = multiprocessing.get_context("spawn")
    stop, writes, report = ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    writer = ctx.Process(target=_write_while, args=(url, stop, writes, report))
    writer.start()
    progress: list[tuple[int, int]] = []  # (rows the batch deleted, writes before the next)

    def between_batches(deleted: int) -> None:
        seen, deadline = writes.value, time.monotonic() + PROGRESS_WAIT_S
        while writes.value == seen:
            assert writer.is_alive(), "the writer died (a write failed: see its traceback above)"
            assert time.monotonic() < deadline, (
                f"no write committed after batch {len(progress) + 1} ({deleted} rows): "
                "cleanup holds the write lock across batches"
            )
            time.sleep(0.01)
        progress.append((deleted, writes.value))

    try:
        while writes.value == 0:  # the writer is up and writing before cleanup starts
            assert writer.is_alive(), "the writer died (a write failed: see its traceback above)"
            time.sleep(0.05)
        with StateStore(url, settings=Settings()) as store:
            result = store.cleanup(batch_size=STALL_BATCH, on_batch=between_batches)
    finally:
        stop.set()
    total, last = report.get(timeout=60)
    writer.join(60)
    assert result.deleted == STALL_ROWS and result.batches >= STALL_ROWS // STALL_BATCH + 1
    # Cleanup's (paced) batches, then (a store keeping history) its pruning batches, each
    # followed by a write.
    cleanup_batches = [deleted for deleted, _ in progress][: result.batches]
    assert sum(cleanup_batches) == STALL_ROWS and max(cleanup_batches) <= STALL_BATCH
    counts = [count for _, count in progress]
    assert counts == sorted(set(counts)), counts  # the writer moved on after every batch
    assert writer.exitcode == 0 and total >= counts[-1] and last == {"n": total - 1}


def test_history_pruning_is_paced_like_the_expiry_on_sqlite(tmp_path: Path) -> None:
    """Pruning walks every key holding versions, so after a big expiry it holds SQLite's write
    lock as long as the expiry did: its batches start small, grow while fast, and each is
    followed by a pause as long as the batch (a writer waiting on the lock gets in), never by
    the next batch at once."""
    with StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings()) as store:
        assert store.history
        acc = store.task_state(TaskScope("dag", "run", "task"))
        for n in range(3 * cleanup.FIRST_BATCH):
            acc.set(f"k{n}", n)
        backend = store.backend
        spans: list[tuple[float, float, int]] = []  # (start, end, batch size asked)
        prune = backend.prune_versions

        def timed_prune(
            keep: int, before: float | None, limit: int, after: tuple[str, str] | None = None
        ) -> tuple[int, tuple[str, str] | None]:
            t0 = time.perf_counter()
            got = prune(keep, before, limit, after)
            spans.append((t0, time.perf_counter(), limit))
            return got

        backend.prune_versions = timed_prune  # type: ignore[method-assign]
        cleanup.prune_versions(backend, keep=store.history, before=None, batch_size=100_000)
    sizes = [size for _, _, size in spans]
    assert len(spans) >= 2 and sizes[0] == cleanup.FIRST_BATCH and max(sizes) < 100_000, sizes
    for (t0, t1, _), (t2, _, _) in itertools.pairwise(spans):  # a pause after each batch
        assert t2 - t1 >= min(t1 - t0, 2 * cleanup.BATCH_TARGET_S) * 0.99
