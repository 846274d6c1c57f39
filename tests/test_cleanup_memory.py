"""`clean` with offloading streams (issue 22): the live references go to a temporary file and
objects are checked a batch at a time, so memory is bounded by the batch, not by the rows."""

from __future__ import annotations

import os
import tracemalloc
import uuid
from pathlib import Path

import pytest
from tests.expired_rows import load_rows

from taskstate import StateStore, TaskScope
from taskstate.backends.base import WorkerStateBackend
from taskstate.backends.objects import digest
from taskstate.backends.offload import OffloadBackend
from taskstate.backends.sqlite import SQLiteBackend
from taskstate.cleanup import CleanupResult
from taskstate.settings import Settings
from taskstate.stored import REF_PREFIX

NOW = 1_800_000_000.0
ROWS, REFERENCED, ORPHANS = 100_000, 6_000, 2_000
# Measured: 1.2 MiB (a batch of 1,000 objects being checked). The former set of live
# references plus one listing of every object took 7.9 MiB here; holding every row, far more.
PEAK_BOUND = 3 * 2**20


def _ref(i: int) -> str:
    return f"{digest(str(i % 97))}/{digest(str(i))}/{digest(b'v')}-{uuid.uuid4().hex[:16]}"


def _objects(root: Path, refs: list[str]) -> None:
    for ref in refs:
        path = root / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'"v"')


def _traced_cleanup(store: StateStore, *, batch_size: int) -> tuple[CleanupResult, int]:
    """`store.cleanup(batch_size)` and the peak of Python memory it allocated (tracemalloc)."""
    tracemalloc.start()
    try:
        result = store.cleanup(batch_size=batch_size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_clean_with_offloading_over_100000_rows_holds_one_batch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    root = tmp_path / "objects"
    live = [_ref(i) for i in range(REFERENCED)]
    expired = [_ref(i) for i in range(ORPHANS // 2)]  # their rows expired: orphans
    stray = [_ref(i) for i in range(ORPHANS // 2)]  # no row at all: orphans
    _objects(root, live + expired + stray)
    SQLiteBackend(url).schema_status()  # creates the schema
    load_rows(
        url,
        (
            (
                TaskScope(f"dag_{i % 50}", f"run_{i % 7}", f"task_{i % 11}").namespace,
                f"key_{i}",
                REF_PREFIX + live[i] if i < REFERENCED else "1",
                NOW + 3600,
                NOW,
            )
            for i in range(ROWS)
        ),
    )
    old = TaskScope("old", "r", "t").namespace
    load_rows(
        url, ((old, f"k{i}", REF_PREFIX + ref, NOW - 1, NOW - 99) for i, ref in enumerate(expired))
    )
    worker = OffloadBackend(f"file://{root}", keep_versions_s=0)
    with StateStore(url, settings=Settings(), worker_backend=worker, clock=lambda: NOW) as store:
        result, peak = _traced_cleanup(store, batch_size=10_000)
    assert (result.deleted, result.offloaded_orphans) == (len(expired), ORPHANS)
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.1f} MiB"
    left = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert left == set(live)


class _Legacy(WorkerStateBackend):
    """A third-party worker backend written for `sweep(live_refs)`."""

    def __init__(self) -> None:
        self.seen: set[str] | None = None

    def serialize_to_ref(self, namespace: str, key: str, value: str) -> str:
        return f"{namespace}-{key}-{os.urandom(4).hex()}"

    def deserialize_from_ref(self, ref: str) -> str:
        return '"v"'

    def discard(self, refs: list[str]) -> None:
        pass

    def sweep(self, live_refs: set[str], *, dry_run: bool = False) -> int:
        self.seen = live_refs
        return 7


def test_a_worker_backend_with_the_old_sweep_still_gets_every_live_reference(
    tmp_path: Path,
) -> None:
    worker = _Legacy()
    url = f"sqlite:///{tmp_path}/state.db"
    with StateStore(url, settings=Settings(), worker_backend=worker) as store:
        state = store.task_state(TaskScope("d", "r", "t"))
        state.set("a", 1)
        state.set("b", 2)
        refs = {row.value[len(REF_PREFIX) :] for row in store.backend.scan()}
        with pytest.warns(DeprecationWarning, match="sweep_orphans"):
            assert store.cleanup().offloaded_orphans == 7
    assert worker.seen == refs and len(refs) == 2


def test_the_offload_backend_still_sweeps_a_set_of_references(tmp_path: Path) -> None:
    worker = OffloadBackend(f"file://{tmp_path}", keep_versions_s=0)
    refs = [worker.serialize_to_ref("ns", f"k{i}", '"v"') for i in range(3)]
    assert worker.sweep({refs[0]}, dry_run=True) == 2
    assert worker.sweep({refs[0]}) == 2
    assert worker.deserialize_from_ref(refs[0]) == '"v"'
    assert worker.sweep({refs[0]}) == 0


def test_unbatched_cleanup_with_history_holds_a_chunk_of_the_deleted_keys(tmp_path: Path) -> None:
    """`state_cleanup_batch_size = 0` with history on: one transaction, but the deleted keys
    (read back to record their deletion versions) come a chunk at a time, not all at once."""
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).schema_status()  # creates the schema
    expired = 20_000
    load_rows(
        url,
        (
            (TaskScope(f"dag_{i % 50}", "r", "t").namespace, f"key_{i:05}", "1", NOW - 1, NOW - 9)
            for i in range(expired)
        ),
    )
    with StateStore(url, settings=Settings(), clock=lambda: NOW) as store:
        assert store.history  # on by default
        result, peak = _traced_cleanup(store, batch_size=0)
        assert (result.deleted, result.batches) == (expired, 1)
        gone = store.task_state(TaskScope("dag_7", "r", "t"))
        assert [v.op for v in gone.history("key_00007")] == ["expire"]
    # Measured: 0.2 MiB. All 20,000 keys at once (the former fetchall): 3.5 MiB.
    assert peak < 2**20, f"peak {peak / 2**20:.1f} MiB"
