"""`taskstate clean` on many expired task rows, on both built-in backends, via the CLI. The
million-row figure is bench/cleanup_scale.py's (it asserts every row deleted too): here enough
rows for several batches and a remainder, which is what the claims below need."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.expired_rows import KEPT_EACH, load

from taskstate import StateStore, TaskScope
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


STALL_ROWS, STALL_BATCH, STALL_BOUND_S = 300_000, 10_000, 2.0


def _write_while(url: str, stop: Any, latencies: Any) -> None:
    """`set` task state in a loop until told to stop; report each call's latency."""
    with StateStore(url, settings=Settings()) as store:
        acc = store.task_state(TaskScope("writer", "run", "task"))
        worst, n = 0.0, 0
        while not stop.is_set():
            started = time.perf_counter()
            acc.set(f"k{n % 100}", {"n": n})
            worst, n = max(worst, time.perf_counter() - started), n + 1
        latencies.put((n, worst, acc.get(f"k{(n - 1) % 100}")))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_in_batches_does_not_stall_a_concurrent_writer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """While `taskstate clean` deletes 300,000 expired rows in batches of 10,000, a writer in
    another process keeps writing, and no single `set` waits longer than 2 s (one batch)."""
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if kind == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    load(url, STALL_ROWS, time.time())
    ctx = multiprocessing.get_context("spawn")
    stop, latencies = ctx.Event(), ctx.Queue()
    writer = ctx.Process(target=_write_while, args=(url, stop, latencies))
    writer.start()
    try:
        time.sleep(2)  # the writer is up and writing before cleanup starts
        proc = subprocess.run(
            [sys.executable, "-m", "taskstate", "--url", url, "clean", "--batch-size",
             str(STALL_BATCH), "--json"],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
    finally:
        stop.set()
    writes, worst, last = latencies.get(timeout=60)
    writer.join(60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["deleted"] == STALL_ROWS and result["batches"] >= STALL_ROWS // STALL_BATCH + 1
    assert writer.exitcode == 0 and writes > 0 and last == {"n": writes - 1}
    assert worst < STALL_BOUND_S, f"a set waited {worst:.2f}s during cleanup"
