"""`taskstate clean` on many expired task rows, on both built-in backends, via the CLI. The
million-row figure is bench/cleanup_scale.py's (it asserts every row deleted too): here enough
rows for several batches and a remainder, which is what the claims below need."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest
from tests import spawned
from tests.cli import invoke
from tests.expired_rows import KEPT_EACH, load

from taskstate import StateStore
from taskstate.settings import Settings

EXPIRED = 27_500  # at least 5 full batches of 5,000 and a partial one


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
    proc = invoke("--url", url, "clean", "--batch-size", "5000", "--json")  # tests/cli.py
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["expired"], result["deleted"]) == (EXPIRED, EXPIRED)
    # Paced: batches start at 1,000 rows and grow while fast, never past 5,000.
    assert result["batches"] >= EXPIRED // 5000 + 1
    with StateStore(url, settings=Settings()) as store:
        left = sorted(row.key.rstrip("0123456789") for row in store.backend.scan())
    assert left == ["fresh"] * KEPT_EACH + ["key"] * KEPT_EACH + ["never"] * KEPT_EACH


STALL_ROWS, STALL_BATCH = 30_000, 5_000  # 6 full batches and an empty last one
# A wait for the writer to progress between two batches that only a lock held across batches
# (the writer never gets in) can exhaust: not a latency bound.
PROGRESS_WAIT_S = 120


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_in_batches_does_not_stall_a_concurrent_writer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """While cleanup deletes 30,000 expired rows in batches of 5,000, a writer in another
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
    writer = ctx.Process(target=spawned.write_while, args=(url, stop, writes, report))
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
