"""The upgrade path, for real: Airflow 3.2.2 with taskstate on PostgreSQL, the same database
upgraded to Airflow 3.3.2 (`airflow db migrate`), `taskstate migrate-to-airflow`, and 3.3.2
tasks of the same DAG run reading what 3.2.2's tasks wrote from Airflow's own store.

One deployment for the module (the tests run in file order and build on each other): the DAG
run of tests/airflow/upgrade_dags/ts_upgrade.py is made on 3.2.2 — a mapped task's state, an
asset's watermark, and a ResumableJobMixin task whose worker dies with its job in flight.
Runs when Airflow 3.3 is selected (it builds on the pinned 3.2 env as "before").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.airflow.conftest import native
from tests.airflow.harness import AirflowHome
from tests.resumable import jobsystem
from tests.s3_server import running_s3, s3_options

from taskstate import NEVER_EXPIRE, AssetScope, StateStore, TaskScope
from taskstate.airflow.migrate import MIGRATED_KEY
from taskstate.scope import task_prefix
from taskstate.settings import Settings

# A test here may wait for an Airflow home's `db migrate` on PostgreSQL (the module's fixture,
# or the 3.3 upgrade: 600 s), a taskstate command (300 s) and an Airflow run (600 s): more than
# the suite's default 600 s per test together.
pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.timeout(1800)]

DAG = Path(__file__).with_name("upgrade_dags") / "ts_upgrade.py"
DATE = "2025-01-01"
BULK = 400  # extra keys, so that a SIGKILL lands half-way through the copy


class Upgrade:
    """Both Airflow homes on one PostgreSQL database, and what the tests learn on the way."""

    def __init__(self, root: Path, db_url: str) -> None:
        self.db_url = db_url
        self.out = root / "out"
        self.out.mkdir()
        self.jobs_db = root / "jobs.db"
        sqlalchemy_url = db_url.replace("postgresql://", "postgresql+psycopg://", 1)
        env = {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlalchemy_url,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": sqlalchemy_url,
            "RESUMABLE_JOBSYSTEM": str(Path(jobsystem.__file__)),
            "RESUMABLE_JOBS_DB": str(self.jobs_db),
            "UPGRADE_OUT": str(self.out),
        }
        self.env = env
        self.before = AirflowHome("3.2", root / "before", [DAG], env)
        self.after: AirflowHome | None = None
        self.run_id = ""

    def store(self) -> StateStore:
        return StateStore(self.db_url, settings=Settings())

    def report(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / f"{name}.json").read_text())
        return data

    def upgrade(self, root: Path) -> AirflowHome:
        self.after = AirflowHome("3.3", root / "after", [DAG], self.env)  # airflow db migrate
        return self.after

    def taskstate(
        self, *args: str, env: Mapping[str, str] = {}
    ) -> subprocess.CompletedProcess[str]:
        assert self.after is not None
        return self.after.python("-m", "taskstate", *args, env=env)

    def task_test(self, task_id: str, *extra: str, env: Mapping[str, str] = {}) -> str:
        assert self.after is not None
        return self.after.airflow(
            "tasks", "test", "ts_upgrade", task_id, self.run_id, *extra,
            env={"UPGRADE_PHASE": "after", **env},
        )  # fmt: skip

    def native_rows(self) -> dict[tuple[str, int, str], tuple[Any, Any]]:
        """(task_id, map_index, key) -> (value, expires_at) in Airflow's task_state_store.

        Read with SQL by the test, to observe; the product writes through Airflow's backend.
        """
        with psycopg.connect(self.db_url) as conn:
            rows = conn.execute(
                "SELECT task_id, map_index, key, value, expires_at FROM task_state_store "
                "WHERE dag_id = 'ts_upgrade'"
            ).fetchall()
        return {(t, m, k): (json.loads(v), e) for t, m, k, v, e in rows}

    def native_asset(self, name: str, key: str) -> Any:
        with psycopg.connect(self.db_url) as conn:
            row = conn.execute(
                "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
                "WHERE a.name = %s AND s.key = %s",
                (name, key),
            ).fetchone()
        return None if row is None else json.loads(row[0])


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Upgrade]:
    if "3.3" not in native():
        pytest.skip("Airflow 3.3 not selected (TASKSTATE_AIRFLOW_VERSIONS)")
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db_url = postgres_url.rsplit("/", 1)[0] + "/" + name
    root = tmp_path_factory.mktemp("upgrade")
    up = Upgrade(root, db_url)
    yield up
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_airflow_3_2_writes_task_and_asset_state(upgrade: Upgrade) -> None:
    before = upgrade.before
    proc = before.python("-m", "taskstate", "db", "migrate")
    assert proc.returncode == 0, proc.stderr
    before.dags_test("ts_upgrade", DATE, env={"UPGRADE_PHASE": "before"}, expect="failed")
    with upgrade.store() as store:
        scopes = {s for s, _ in store.scopes(task_prefix("ts_upgrade"))}
        (upgrade.run_id,) = {s.run_id for s in scopes if isinstance(s, TaskScope)}
        run = upgrade.run_id
        job = store.task_state(TaskScope("ts_upgrade", run, "submit"))
        assert isinstance(job.get("batch_job_id"), int)  # persisted before the worker died
        assert job.get("batch_job_id__intent")["external_id"] == job.get("batch_job_id")
        for i in range(3):
            assert (
                store.task_state(TaskScope("ts_upgrade", run, "remember", i)).get("item")
                == (i + 1) * 10
            )
        orders = store.asset_state(AssetScope(name="upgrade_orders"))
        assert orders.get("watermark") == "2025-01-01T00:00:00+00:00"
        # What the migration must leave behind, each for its own reason:
        bulk = store.task_state(TaskScope("ts_upgrade", run, "remember", 0))
        for i in range(BULK):
            bulk.set(f"bulk_{i:03}", {"i": i})
        forever = store.task_state(TaskScope("ts_upgrade", run, "remember", 1))
        forever.set("forever", 1, retention=NEVER_EXPIRE)  # its migration marker must not expire
        store.task_state(TaskScope("ts_upgrade", "gone_run", "t")).set("k", 1)
        store.task_state(TaskScope("ts_upgrade", run, "no_such_task")).set("k", 1)
        store.asset_state(AssetScope(name="never_declared")).set("k", 1)
        store.restore(TaskScope("ts_upgrade", run, "read_asset"), "expired", 1, time.time() - 60)
    jobs = jobsystem.JobSystem(upgrade.jobs_db)
    assert [state for _, state in jobs.jobs_for(f"upgrade/{run}")] == ["PENDING"]  # in flight


def test_upgraded_to_3_3_tasks_warn_about_unmigrated_state(
    upgrade: Upgrade, tmp_path_factory: pytest.TempPathFactory
) -> None:
    after = upgrade.upgrade(tmp_path_factory.mktemp("upgrade-after"))
    status, detail = after.doctor()["unmigrated state"]
    assert status == "warn" and "ts_upgrade" in detail and "migrate-to-airflow" in detail
    output = upgrade.task_test("read_asset")
    assert "never copied into Airflow's own store" in output
    assert upgrade.report("read_asset") == {"watermark": None}  # Airflow's store: empty so far


def test_migration_killed_half_way_then_rerun_gives_the_same_result(upgrade: Upgrade) -> None:
    after = upgrade.after
    assert after is not None
    # A key written natively after the upgrade: the migration must never overwrite it.
    conflict = after.python(
        "-c",
        "import sys; from airflow.state import get_state_backend, TaskScope\n"
        "scope = TaskScope('ts_upgrade', sys.argv[1], 'remember', 2)\n"
        "get_state_backend().set(scope, 'item', '999')",
        upgrade.run_id,
    )
    assert conflict.returncode == 0, conflict.stderr
    proc = subprocess.Popen(
        [str(after.env / "bin" / "python"), "-m", "taskstate", "migrate-to-airflow"],
        env=after.environ, cwd=after.home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    copied_when_killed = 0
    while proc.poll() is None:
        copied_when_killed = len(upgrade.native_rows())
        if copied_when_killed >= 100:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    assert proc.wait() == -signal.SIGKILL, "the migration finished before it could be killed"
    assert 100 <= copied_when_killed < BULK

    rerun = upgrade.taskstate("migrate-to-airflow", "--json")
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert report["counts"]["unchanged"] >= copied_when_killed - 1  # the conflict key
    assert report["counts"]["conflict"] == 1
    assert report["counts"]["skipped: DAG run gone"] == 1
    assert report["counts"]["skipped: task instance gone"] == 1
    assert report["counts"]["skipped: no active asset"] == 1
    assert report["intent_rows"] == 1 and report["lost_submissions"] == []
    assert any("remember[2] key 'item'" in note for note in report["notes"])

    # The same result as one uninterrupted run: every live key, value and expiry, nothing else.
    with upgrade.store() as store:
        expected = {
            (s.task_id, s.map_index, e.key): e
            for s, e in store.entries(task_prefix("ts_upgrade", upgrade.run_id))
            if isinstance(s, TaskScope) and s.task_id != "no_such_task"
        }
    native_rows = upgrade.native_rows()
    assert set(native_rows) == set(expected)
    for where, entry in expected.items():
        value, expires = native_rows[where]
        if where == ("remember", 2, "item"):
            assert value == 999  # kept
            continue
        assert value == entry.value, where
        if entry.expires_at is None:
            assert expires is None, where
        else:
            assert abs(expires.timestamp() - entry.expires_at) < 0.001, where
    assert ("read_asset", -1, "expired") not in native_rows
    assert upgrade.native_asset("upgrade_orders", "watermark") == "2025-01-01T00:00:00+00:00"

    again = upgrade.taskstate("migrate-to-airflow", "--json", "--verify")
    second = json.loads(again.stdout)
    assert second["counts"]["copied"] == 0  # a second run changes nothing
    assert again.returncode == 1  # --verify: the conflict is the one difference
    assert [m for m in second["mismatches"]] == [
        f"different in Airflow's store: ts_upgrade/{upgrade.run_id}/remember[2] key 'item'"
    ]
    status, _ = upgrade.after.doctor()["unmigrated state"]  # type: ignore[union-attr]
    assert status == "ok"

    # Each task instance's marker lives as long as its longest-lived key (for ever if one never
    # expires): doctor must not call it unmigrated while its state is still there.
    lasts: dict[TaskScope, list[float | None]] = {}
    for (task_id, map_index, _), entry in expected.items():
        scope = TaskScope("ts_upgrade", upgrade.run_id, task_id, map_index)
        lasts.setdefault(scope, []).append(entry.expires_at)
    assert any(None in expiries for expiries in lasts.values())
    with upgrade.store() as store:
        for scope, expiries in lasts.items():
            marker = store.backend.get(scope.meta_namespace, MIGRATED_KEY)
            assert marker is not None, scope
            wanted = None if None in expiries else max(e for e in expiries if e is not None)
            assert marker.expires_at == wanted, scope


def test_a_3_3_task_reconnects_to_the_job_submitted_on_3_2(upgrade: Upgrade) -> None:
    with jobsystem.running_jobsystem(upgrade.jobs_db) as jobs:
        upgrade.task_test("submit")
        logical = f"upgrade/{upgrade.run_id}"
        created = jobs.jobs_for(logical)
        submissions = jobs.submissions_for(logical)
    report = upgrade.report("submit")
    assert report["mixin"].startswith("airflow.")  # Airflow 3.3's own ResumableJobMixin
    assert report["stored_before"] == created[0][0]
    assert len(created) == 1 and len(submissions) == 1  # reconnected, never resubmitted
    assert report["result"] == {
        "job_id": created[0][0],
        "output": jobsystem.expected_output(logical),
    }


def test_a_3_3_task_reads_the_migrated_asset_state(upgrade: Upgrade) -> None:
    # (The mapped task's keys were compared row by row with Airflow's table above.)
    upgrade.task_test("read_asset")
    assert upgrade.report("read_asset") == {"watermark": "2025-01-01T00:00:00+00:00"}


def test_variables_migrate_moves_a_real_variable_into_asset_state(upgrade: Upgrade) -> None:
    after = upgrade.after
    assert after is not None
    variables = after.home / "variables.json"
    variables.write_text(
        json.dumps(
            {"orders_watermark": '"2025-02-01T00:00:00+00:00"', "not_state": "{'single': 1}"}
        )
    )
    after.airflow("variables", "import", str(variables))
    refused = upgrade.taskstate(
        "variables", "migrate", "--variable", "not_state", "--to-asset", "upgrade_orders",
        "--key", "x",
    )  # fmt: skip
    assert refused.returncode != 0 and "is not JSON" in refused.stderr
    moved = upgrade.taskstate(
        "variables", "migrate", "--variable", "orders_watermark", "--to-asset", "upgrade_orders",
        "--key", "watermark_from_variable", "--delete-variable",
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert "asset_state_store.set('watermark_from_variable'" in moved.stdout
    assert upgrade.native_asset("upgrade_orders", "watermark_from_variable") == (
        "2025-02-01T00:00:00+00:00"
    )
    with psycopg.connect(upgrade.db_url) as conn:  # observed with SQL by the test
        keys = {k for (k,) in conn.execute("SELECT key FROM variable").fetchall()}
    assert keys == {"not_state"}  # --delete-variable deleted the moved one


def test_object_storage_backend_on_s3_round_trips_and_is_cleaned(upgrade: Upgrade) -> None:
    with running_s3() as endpoint:
        import s3fs

        options = s3_options(endpoint)
        s3fs.S3FileSystem(**options).mkdir("upgrade-state")
        env = {
            "UPGRADE_PHASE": "s3",
            "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.airflow.ObjectStorageStateBackend",
            "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL": "s3://upgrade-state/objects",
            "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_STORAGE_OPTIONS": json.dumps(options),
        }
        upgrade.task_test("offload", env=env)
        assert upgrade.report("offload") == {"big_back": True, "over": "second"}
        rows = upgrade.native_rows()
        assert set(rows[("offload", -1, "big")][0]) == {"__airflow_state_ref__"}
        assert ("offload", -1, "gone") not in rows

        # 5 objects: big, gone (row deleted; its object is young, so delete() kept it), over
        # twice, short (expired by now). Unreferenced: gone, the first over, short — and the
        # grace period protects each of them while it is young (a write may be in flight).
        time.sleep(1.5)
        dry = upgrade.taskstate("clean", "--airflow-offload", "--dry-run", "--json", env=env)
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout) == {"objects": 5, "removed": 0, "kept_young": 3}
        assert upgrade.after is not None
        sweep = upgrade.after.python(
            "-c",
            "import json\n"
            "from taskstate.airflow.objectstore import ObjectStorageStateBackend, sweep\n"
            "result = sweep(ObjectStorageStateBackend(keep_versions_s=0))\n"
            "print(json.dumps(result.__dict__))",
            env=env,
        )
        assert sweep.returncode == 0, sweep.stderr
        assert json.loads(sweep.stdout.strip().splitlines()[-1]) == {
            "objects": 5, "removed": 3, "kept_young": 0,
        }  # fmt: skip
        assert ("offload", -1, "short") not in upgrade.native_rows()  # Airflow's cleanup ran
        (upgrade.out / "offload.json").unlink()
        upgrade.task_test("offload", env={**env, "UPGRADE_PHASE": "s3-read"})
        assert upgrade.report("offload") == {"big_back": True, "over": "second"}
