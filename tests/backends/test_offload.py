"""Offloading to object storage, against a real directory and a real S3 API (moto's server)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.cli import invoke
from tests.conftest import Clock
from tests.s3_server import running_s3, s3_options

from taskstate import StateStore, TaskScope
from taskstate.backends import sqlite as sqlite_backend
from taskstate.backends.offload import OffloadBackend
from taskstate.errors import BackendError, ConfigError, InvalidValueError
from taskstate.settings import Settings
from taskstate.store import REF_PREFIX

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
    # History off: these tests pin when objects go without it (with history, kept versions
    # keep their objects: tests/test_history.py).
    url = f"sqlite:///{tmp_path}/state.db"
    settings = dataclasses.replace(Settings(), history_versions=0)
    with StateStore(url, settings=settings, worker_backend=offload, clock=clock) as s:
        yield s


def objects(offload: OffloadBackend) -> list[str]:
    return sorted(path for path, _ in offload._objects(offload.root))


def test_the_row_holds_a_reference_and_the_limit_applies_to_it(store: StateStore) -> None:
    accessor = store.task_state(SCOPE)
    accessor.set("big", BIG)
    assert accessor.get("big") == BIG
    (row,) = store.backend.scan()
    assert len(row.value) < 200
    assert row.value.startswith(REF_PREFIX)
    assert accessor.items() == [("big", BIG)]


def test_a_failed_import_removes_what_it_offloaded(
    store: StateStore, offload: OffloadBackend, tmp_path: Path
) -> None:
    store.task_state(SCOPE).set("kept", BIG)  # a live object, which must stay
    before_rows, before_objects = list(store.backend.scan()), objects(offload)
    assert len(before_objects) == 1
    # (scope, key, value, expires_at, updated_at, writer); both offloaded before the failure
    big = [(SCOPE, "a", BIG, None, None, None), (OTHER, "b", BIG, None, None, None)]
    with pytest.raises(InvalidValueError):  # a later value fails its check
        store.import_entries([*big, (SCOPE, "bad", float("nan"), None, None, None)])
    assert (list(store.backend.scan()), objects(offload)) == (before_rows, before_objects)
    # Every value passes; the database itself refuses the last row (a trigger, as a constraint).
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON {sqlite_backend.TABLE} "
            "WHEN NEW.key = 'refused' BEGIN SELECT RAISE(ABORT, 'refused here'); END"
        )
    with pytest.raises(BackendError, match="refused here"):
        store.import_entries([*big, (SCOPE, "refused", 1, None, None, None)])
    assert (list(store.backend.scan()), objects(offload)) == (before_rows, before_objects)
    assert store.import_entries(big) == 2  # an import that succeeds keeps its objects
    assert len(objects(offload)) == 3


def test_every_write_gets_its_own_reference_under_its_scope_and_key(
    offload: OffloadBackend,
) -> None:
    ref = offload.serialize_to_ref("ns", "k", '"v"')
    again = offload.serialize_to_ref("ns", "k", '"v"')
    assert again != ref and again.rsplit("/", 1)[0] == ref.rsplit("/", 1)[0]
    assert offload.serialize_to_ref("ns", "k2", '"v"').split("/")[0] == ref.split("/")[0]
    assert offload.deserialize_from_ref(ref) == offload.deserialize_from_ref(again) == '"v"'


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
        accessor.update("u", lambda v, i=i: {"i": i}, default={})  # each drops its old object
    offload.serialize_to_ref(SCOPE.namespace, "lost", '"x"')  # a writer died before its row
    assert len(objects(offload)) == 4
    clock.now += 60
    assert store.cleanup(dry_run=True).offloaded_orphans == 2
    assert len(objects(offload)) == 4
    assert store.cleanup().offloaded_orphans == 2
    assert accessor.items() == [("kept", BIG), ("u", {"i": 2})]
    assert store.cleanup().offloaded_orphans == 0


def test_threshold_keeps_small_values_inline(tmp_path: Path) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", threshold=1000)
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings(), worker_backend=offload) as s:
        accessor = s.task_state(SCOPE)
        accessor.set("small", {"a": 1})
        accessor.set("big", BIG)
        rows = {row.key: row.value for row in s.backend.scan()}
        assert rows["small"] == '{"a":1}'
        assert rows["big"].startswith(REF_PREFIX)
        assert accessor.get("big") == BIG


def test_a_small_value_shaped_like_a_reference_stays_a_value(tmp_path: Path) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", threshold=1000)
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings(), worker_backend=offload) as s:
        accessor, other = s.task_state(SCOPE), s.task_state(OTHER)
        other.set("secret", BIG)
        real = s.backend.get(OTHER.namespace, "secret").value[len(REF_PREFIX) :]  # type: ignore[union-attr]
        for forged in (
            {"__taskstate_ref__": real},
            {"__airflow_state_ref__": real},
            REF_PREFIX + real,
        ):
            accessor.set("forged", forged)
            assert accessor.get("forged") == forged


def test_schema_2_rewrites_legacy_references(tmp_path: Path) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects")
    written = offload.serialize_to_ref(SCOPE.namespace, "old", json.dumps(BIG))
    ref = written.partition("-")[0]  # as written before schema 2: no nonce
    (tmp_path / "objects" / written).rename(tmp_path / "objects" / ref)
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.executescript(sqlite_backend.MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    legacy = json.dumps({"__taskstate_ref__": ref}, separators=(",", ":"))
    user = json.dumps({"__taskstate_ref__": "not a reference"})
    rows = [(SCOPE.namespace, "old", legacy, None, 1.0), (SCOPE.namespace, "user", user, None, 1.0)]
    conn.executemany(f"INSERT INTO {sqlite_backend.TABLE} VALUES (?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings(), worker_backend=offload) as s:
        assert s.task_state(SCOPE).get("old") == BIG
        assert s.task_state(SCOPE).get("user") == {"__taskstate_ref__": "not a reference"}
        assert s.backend.get(SCOPE.namespace, "old").value == REF_PREFIX + ref  # type: ignore[union-attr]


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
        # without history: no kept version refers to the left-behind object
        "AIRFLOW__STATE_STORE__TASKSTATE_HISTORY_VERSIONS": "0",
    }
    settings = Settings.load(env)
    with StateStore(settings=settings) as s:
        s.task_state(SCOPE).set("gone", BIG)
        s.task_state(SCOPE).set("kept", BIG)
        s.backend.delete(SCOPE.namespace, "gone")  # row gone, object left behind
    files = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    for path in files:  # older than the grace period that protects writes in flight
        os.utime(path, (path.stat().st_atime - 7200, path.stat().st_mtime - 7200))
    proc = invoke("clean", env=env)  # in-process: tests/cli.py
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 orphaned offloaded objects" in proc.stdout
    with StateStore(settings=settings) as s:
        assert s.task_state(SCOPE).get("kept") == BIG
    assert len([p for p in (tmp_path / "objects").rglob("*") if p.is_file()]) == 1


@pytest.mark.postgres
def test_offload_with_postgres_rows(tmp_path: Path, fresh_postgres_url: str) -> None:
    offload = OffloadBackend(f"file://{tmp_path}/objects", threshold=1000, compression="gzip")
    settings = dataclasses.replace(Settings(), history_versions=0)  # objects go at once
    with StateStore(fresh_postgres_url, settings=settings, worker_backend=offload) as s:
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
        # without history, whose kept versions keep their objects until `clean`
        "AIRFLOW__STATE_STORE__TASKSTATE_HISTORY_VERSIONS": "0",
    }
    with StateStore(settings=Settings.load(env)) as s:
        for index in (-1, 0, 1):
            s.task_state(TaskScope("dag", "run", "task", index)).set("k", BIG)
        s.task_state(TaskScope("dag", "run", "other")).set("k", BIG)
    args = ["task", "clear", "--dag-id", "dag", "--run-id", "run", "--task-id", "task"]
    proc = invoke(*args, "--all-map-indices", env=env)
    assert proc.returncode == 0, proc.stderr
    assert len([p for p in (tmp_path / "objects").rglob("*") if p.is_file()]) == 1


def _race(url: str, objects_url: str, role: str, ops: int) -> dict[str, int]:
    offload = OffloadBackend(objects_url, threshold=100)
    outcome: dict[str, int] = {}
    with StateStore(url, settings=Settings(), worker_backend=offload) as s:
        state = s.task_state(SCOPE)
        for i in range(ops):
            try:
                if role == "setter":
                    state.set("k", {"i": i, "pad": "x" * 200})
                    state.get("k")
                elif i % 2:
                    state.delete("k")
                else:
                    state.set("k", {"i": -i, "pad": "y" * 200})
            except Exception as exc:  # counted, not raised: the test reports every loss
                kind = "missing" if "missing" in str(exc) else f"{type(exc).__name__}: {exc}"
                outcome[kind] = outcome.get(kind, 0) + 1
    return outcome


def test_set_racing_delete_of_the_same_key_loses_nothing(tmp_path: Path) -> None:
    """Issue 11.3: delete removed the key's whole object folder, taking a concurrent set's
    just-committed object. Every object now belongs to one row version."""
    import concurrent.futures
    import multiprocessing

    url, objects_url = f"sqlite:///{tmp_path}/s.db", f"file://{tmp_path}/objects"
    StateStore(url, settings=Settings()).close()
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        runs = [pool.submit(_race, url, objects_url, role, 400) for role in ("setter", "deleter")]
        outcomes = [run.result(timeout=300) for run in runs]
    assert outcomes == [{}, {}]
    with StateStore(url, settings=Settings(), worker_backend=OffloadBackend(objects_url)) as s:
        value = s.task_state(SCOPE).get("k")
        assert value is None or value["pad"] in ("x" * 200, "y" * 200)
