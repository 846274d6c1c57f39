"""Offloading to object storage, against a real directory and a real S3 API (moto's server)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Clock
from tests.s3_server import running_s3, s3_options

from taskstate import StateStore, TaskScope
from taskstate.backends.offload import OffloadBackend, sweep_orphans
from taskstate.errors import ConfigError
from taskstate.settings import Settings
from taskstate.store import REF_MARKER

SCOPE = TaskScope("dag", "run", "task")
OTHER = TaskScope("dag", "run", "task", 3)
BIG = {"rows": ["é" * 100] * 2000}  # ~400 KB of JSON, far over the 64 KiB row limit


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    import s3fs

    with running_s3() as endpoint:
        s3fs.S3FileSystem(**s3_options(endpoint)).mkdir("state-bucket")
        yield endpoint


@pytest.fixture(params=["file", "s3"])
def offload(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OffloadBackend]:
    if request.param == "file":
        yield OffloadBackend(f"file://{tmp_path}/objects", keep_versions_s=0)
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        yield OffloadBackend(
            f"s3://state-bucket/{tmp_path.name}",
            storage_options=s3_options(endpoint),
            keep_versions_s=0,
        )


@pytest.fixture
def store(offload: OffloadBackend, tmp_path: Path, clock: Clock) -> Iterator[StateStore]:
    url = f"sqlite:///{tmp_path}/state.db"
    with StateStore(url, settings=Settings(), worker_backend=offload, clock=clock) as s:
        yield s


def objects(offload: OffloadBackend) -> list[str]:
    return sorted(path for path, _ in offload._objects(offload.root))


def test_the_row_holds_a_reference_and_the_limit_applies_to_it(store: StateStore) -> None:
    accessor = store.task_state(SCOPE)
    accessor.set("big", BIG)
    assert accessor.get("big") == BIG
    (row,) = store.backend.scan()
    assert len(row.value) < 200
    assert set(json.loads(row.value)) == {REF_MARKER}
    assert accessor.items() == [("big", BIG)]


def test_references_are_deterministic_per_scope_key_and_value(offload: OffloadBackend) -> None:
    ref = offload.serialize_to_ref("ns", "k", '"v"')
    assert offload.serialize_to_ref("ns", "k", '"v"') == ref
    assert offload.serialize_to_ref("ns", "k2", '"v"').split("/")[0] == ref.split("/")[0]
    assert offload.serialize_to_ref("ns", "k", '"w"').rsplit("/", 1)[0] == ref.rsplit("/", 1)[0]
    assert offload.deserialize_from_ref(ref) == '"v"'


def test_delete_and_clear_remove_the_objects(store: StateStore, offload: OffloadBackend) -> None:
    mine, other = store.task_state(SCOPE), store.task_state(OTHER)
    mine.set("a", BIG)
    mine.set("b", [1])
    other.set("a", BIG)
    assert len(objects(offload)) == 3
    mine.delete("a")
    assert len(objects(offload)) == 2
    mine.clear()
    assert mine.keys() == []
    assert other.get("a") == BIG
    assert len(objects(offload)) == 1


def test_a_compare_and_set_that_fails_changes_nothing(store: StateStore) -> None:
    accessor = store.task_state(SCOPE)
    accessor.set("k", {"v": 1})
    assert not accessor.compare_and_set("k", {"v": 999}, {"v": 2})
    assert accessor.get("k") == {"v": 1}
    assert accessor.compare_and_set("k", {"v": 1}, {"v": 2})
    assert accessor.get("k") == {"v": 2}


def test_update_follows_references(store: StateStore) -> None:
    accessor = store.task_state(SCOPE)
    for _ in range(3):
        accessor.update("n", lambda v: {"n": v["n"] + 1}, default={"n": 0})
    assert accessor.get("n") == {"n": 3}


def test_superseded_versions_are_pruned_after_set(
    store: StateStore, offload: OffloadBackend
) -> None:
    accessor = store.task_state(SCOPE)
    for i in range(5):
        accessor.set("k", {"i": i})
    assert len(objects(offload)) == 1
    assert accessor.get("k") == {"i": 4}


def test_orphans_are_swept_and_live_objects_kept(
    store: StateStore, offload: OffloadBackend, clock: Clock
) -> None:
    accessor = store.task_state(SCOPE)
    accessor.set("expiring", BIG, retention=timedelta(seconds=10))
    accessor.set("kept", BIG)
    for i in range(3):
        accessor.update("u", lambda v, i=i: {"i": i}, default={})  # leaves 2 old versions
    assert len(objects(offload)) == 5
    clock.now += 60
    store.backend.delete_expired(clock(), 0)
    assert sweep_orphans(store, dry_run=True) == 3
    assert len(objects(offload)) == 5
    assert sweep_orphans(store) == 3
    assert accessor.items() == [("kept", BIG), ("u", {"i": 2})]
    assert sweep_orphans(store) == 0


def test_threshold_keeps_small_values_inline(tmp_path: Path) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", threshold=1000)
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings(), worker_backend=offload) as s:
        accessor = s.task_state(SCOPE)
        accessor.set("small", {"a": 1})
        accessor.set("big", BIG)
        rows = {row.key: row.value for row in s.backend.scan()}
        assert rows["small"] == '{"a":1}'
        assert REF_MARKER in rows["big"]
        assert accessor.get("big") == BIG


def test_gzip_compresses_and_reads_back(tmp_path: Path) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", compression="gzip")
    ref = offload.serialize_to_ref("ns", "k", json.dumps(BIG))
    raw = (tmp_path / "objects" / ref).read_bytes()
    assert gzip.decompress(raw) == json.dumps(BIG).encode()
    assert len(raw) < len(json.dumps(BIG)) / 10
    assert json.loads(offload.deserialize_from_ref(ref)) == BIG


def _settings(tmp_path: Path, **options: str) -> Settings:
    env = {
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.backends.offload.OffloadBackend",
        **{f"AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_{k.upper()}": v for k, v in options.items()},
    }
    return Settings.load(env)


def test_configured_from_settings(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, url=f"file://{tmp_path}/objects", threshold="10", compression="gzip"
    )
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=settings) as s:
        worker = s.worker_backend
        assert isinstance(worker, OffloadBackend)
        assert (worker.threshold, worker.compression) == (10, "gzip")
        s.task_state(SCOPE).set("k", BIG)
        assert s.task_state(SCOPE).get("k") == BIG


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "taskstate_offload_url is not set"),
        ({"url": "file:///x", "compression": "zstd"}, "taskstate_offload_compression"),
        ({"url": "file:///x", "threshold": "-1"}, "taskstate_offload_threshold"),
        ({"url": "file:///x", "storage_options": "[1]"}, "taskstate_offload_storage_options"),
        ({"url": "nosuchproto://x"}, "taskstate_offload_url"),
    ],
)
def test_bad_settings_name_the_option(
    tmp_path: Path, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        StateStore(f"sqlite:///{tmp_path}/s.db", settings=_settings(tmp_path, **options))


def test_taskstate_clean_sweeps_orphans(tmp_path: Path) -> None:
    env: dict[str, Any] = {
        **os.environ,
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.backends.offload.OffloadBackend",
        "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL": f"file://{tmp_path}/objects",
        "AIRFLOW__STATE_STORE__TASKSTATE_URL": f"sqlite:///{tmp_path}/s.db",
    }
    settings = Settings.load(env)
    with StateStore(settings=settings) as s:
        s.task_state(SCOPE).set("gone", BIG)
        s.task_state(SCOPE).set("kept", BIG)
        s.backend.delete(SCOPE.namespace, "gone")  # row gone, object left behind
    files = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    for path in files:  # older than the grace period that protects writes in flight
        os.utime(path, (path.stat().st_atime - 7200, path.stat().st_mtime - 7200))
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "clean"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 orphaned offloaded objects" in proc.stdout
    with StateStore(settings=settings) as s:
        assert s.task_state(SCOPE).get("kept") == BIG
    assert len([p for p in (tmp_path / "objects").rglob("*") if p.is_file()]) == 1


@pytest.mark.postgres
def test_offload_with_postgres_rows(tmp_path: Path, fresh_postgres_url: str) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", threshold=1000, compression="gzip")
    with StateStore(fresh_postgres_url, settings=Settings(), worker_backend=offload) as s:
        s.backend.migrate()
        accessor = s.task_state(SCOPE)
        accessor.set("big", BIG)
        accessor.set("small", [1])
        assert accessor.items() == [("big", BIG), ("small", [1])]
        assert len(objects(offload)) == 1
        accessor.clear()
        assert objects(offload) == []


def test_cli_clear_all_map_indices_removes_their_objects(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.backends.offload.OffloadBackend",
        "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL": f"file://{tmp_path}/objects",
        "AIRFLOW__STATE_STORE__TASKSTATE_URL": f"sqlite:///{tmp_path}/s.db",
    }
    with StateStore(settings=Settings.load(env)) as s:
        for index in (-1, 0, 1):
            s.task_state(TaskScope("dag", "run", "task", index)).set("k", BIG)
        s.task_state(TaskScope("dag", "run", "other")).set("k", BIG)
    args = ["task", "clear", "--dag-id", "dag", "--run-id", "run", "--task-id", "task"]
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", *args, "--all-map-indices"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len([p for p in (tmp_path / "objects").rglob("*") if p.is_file()]) == 1
