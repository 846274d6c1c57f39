"""ObjectStorageStateBackend on a real directory (file://), driven in the order Airflow 3.3's
worker accessors call it: set = object, then row; delete = row, then object."""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from taskstate.airflow import ObjectStorageStateBackend
from taskstate.errors import BackendError, ConfigError, InvalidValueError


@dataclass(frozen=True)
class Scope:  # what Airflow's worker passes: airflow.sdk TaskScope / AssetScope fields
    dag_id: str = "d"
    run_id: str = "r"
    task_id: str = "t"
    map_index: int = -1


@dataclass(frozen=True)
class Asset:
    name: str | None = "orders"
    uri: str | None = "s3://b/orders"


def _backend(
    root: Path, *, compression: str = "none", keep_versions_s: float = 3600.0
) -> ObjectStorageStateBackend:
    return ObjectStorageStateBackend(
        f"file://{root}",
        compression=compression,
        storage_options={},
        keep_versions_s=keep_versions_s,
    )


def _age(root: Path, seconds: float) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def test_round_trip_task_and_asset(tmp_path: Path) -> None:
    backend = _backend(tmp_path, compression="gzip")
    ref = backend.serialize_task_state_store_to_ref(value={"rows": [1, 2]}, key="k", scope=Scope())
    assert backend.deserialize_task_state_store_from_ref(ref) == {"rows": [1, 2]}
    aref = backend.serialize_asset_state_store_to_ref(value="wm", key="k", scope=Asset())
    assert backend.deserialize_asset_state_store_from_ref(aref) == "wm"
    # Deterministic per (scope, key) down to the folder; every write is a new object.
    again = backend.serialize_task_state_store_to_ref(
        value={"rows": [1, 2]}, key="k", scope=Scope()
    )
    assert again.rsplit("/", 1)[0] == ref.rsplit("/", 1)[0] and again != ref
    assert aref.split("/")[0] != ref.split("/")[0]


def test_value_rules_hold_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match=r"\['x'\]\[1\]"):
        _backend(tmp_path).serialize_task_state_store_to_ref(
            value={"x": [1, float("nan")]}, key="k", scope=Scope()
        )
    assert not any(tmp_path.rglob("*.*"))


def test_delete_and_clear_keep_young_objects_and_remove_old_ones(tmp_path: Path) -> None:
    backend = _backend(tmp_path, keep_versions_s=60)
    old = backend.serialize_task_state_store_to_ref(value=1, key="k", scope=Scope())
    _age(tmp_path, 120)
    young = backend.serialize_task_state_store_to_ref(value=2, key="k", scope=Scope())
    other = backend.serialize_task_state_store_to_ref(value=3, key="other", scope=Scope())
    backend.delete(Scope(), "k")
    refs = {ref for ref, _ in backend.objects()}
    assert old not in refs and refs == {young, other}
    _age(tmp_path, 120)
    backend.clear(Scope(map_index=0))  # another map index: nothing of ours
    assert len(backend.objects()) == 2
    backend.clear(Scope())
    assert backend.objects() == []
    with pytest.raises(BackendError, match="missing"):
        backend.deserialize_task_state_store_from_ref(young)


def test_bad_reference_and_missing_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError, match="not an ObjectStorageStateBackend reference"):
        _backend(tmp_path).deserialize_task_state_store_from_ref("../../etc/passwd")
    monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="taskstate_offload_url"):
        ObjectStorageStateBackend()


def _racer(root: str, url: str, seed: int, until: float, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Airflow's accessor order against a real row table: set = object then row; delete = row
    then backend.delete; get = row then object. A committed row whose object is gone is a loss.
    The grace period (3 s here, an hour by default) must outlast the object-to-row window of a
    set; the run lasts long enough for objects to outgrow it and be removed by `delete`. The
    rows live in PostgreSQL, as Airflow's do (row locks: no writer waits for seconds, which a
    SQLite file under two busy writers does)."""
    backend = ObjectStorageStateBackend(f"file://{root}", compression="none", storage_options={},
                                        keep_versions_s=3.0)  # fmt: skip
    db = psycopg.connect(url, autocommit=True)
    rng = random.Random(seed)
    losses = sets = 0
    while time.time() < until:
        op = rng.random()
        if op < 0.45:
            ref = backend.serialize_task_state_store_to_ref(value=[seed], key="k", scope=Scope())
            db.execute(
                "INSERT INTO rows VALUES ('k', %s) ON CONFLICT (key) DO UPDATE SET ref = %s",
                (ref, ref),
            )
            sets += 1
        elif op < 0.75:
            db.execute("DELETE FROM rows WHERE key = 'k'")
            backend.delete(Scope(), "k")
        else:
            row = db.execute("SELECT ref FROM rows WHERE key = 'k'").fetchone()
            if row is None:
                continue
            try:
                backend.deserialize_task_state_store_from_ref(row[0])
            except BackendError:
                still = db.execute("SELECT ref FROM rows WHERE key = 'k'").fetchone()
                losses += still is not None and still[0] == row[0]
    results.put((losses, sets))


@pytest.mark.postgres
def test_set_racing_delete_never_leaves_a_row_without_its_object(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    with psycopg.connect(fresh_postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE rows (key TEXT PRIMARY KEY, ref TEXT)")
    until = time.time() + 8.0
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    objects = str(tmp_path / "objects")
    procs = [
        multiprocessing.Process(
            target=_racer, args=(objects, fresh_postgres_url, i, until, results)
        )
        for i in range(2)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join()
    assert [losses for losses, _ in outcomes] == [0, 0]
    # delete() did remove objects (those past the grace period) while the race ran.
    left = len(_backend(tmp_path / "objects").objects())
    assert left < sum(sets for _, sets in outcomes) - 10
    with psycopg.connect(fresh_postgres_url) as db:
        row = db.execute("SELECT ref FROM rows").fetchone()
    if row is not None:  # the last committed row still resolves
        value = _backend(tmp_path / "objects").deserialize_task_state_store_from_ref(row[0])
        assert value in ([0], [1])
