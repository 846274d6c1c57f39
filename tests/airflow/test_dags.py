"""The focused DAGs and the skill's example DAGs under `airflow dags test` / `tasks test`, on
every Airflow taskstate injects into (2.10, 2.11, 3.0, 3.1, 3.2). Most `dags test` runs are
made in one process per version (`dag_runs`, conftest.py's DAG_RUNS); the tests read them."""

from __future__ import annotations

import json
import sqlite3

import pytest
from tests.airflow.harness import DATE, AirflowHome

from taskstate.scope import ASSET_PREFIX, TaskScope, task_prefix

# The harness waits up to 600 s for each Airflow process; the re-run test starts six (`dags
# test`, `tasks clear`, four `tasks test`): at a load of 50-80 they took over the suite's
# default 600 s per test together, and it failed though every process ended.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(6 * 600)]


def test_every_task_gets_its_stores(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    seen = {
        task: airflow_home.task_states("ts_inject", task)[-1]["seen"]
        for task in ("from_context", "from_param", "one_asset", "two_assets", "classic")
    }
    dag_id, _run_id, task_id, map_index = seen["from_context"]["ti"]
    assert (dag_id, task_id, map_index) == ("ts_inject", "from_context", -1)
    # A task without assets gets no asset_state_store, as on Airflow 3.3.
    assert seen["from_context"]["asset_key"] is False
    assert seen["from_param"]["asset_param"] is False
    assert seen["classic"] == {"classic": True}
    assert seen["one_asset"]["by_index"] == "one"
    assert seen["one_asset"]["undeclared"] == ["AssetNotDeclaredError", True, False]
    # Same asset, another task: same state. Two assets: the sugar refuses to guess.
    assert seen["two_assets"]["a_from_other_task"] == "one"
    assert seen["two_assets"]["ambiguous"] == ["AmbiguousAssetError", False, True]


def test_retries_share_state(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    if not airflow_home.task_states("ts_inject", "retried"):
        airflow_home.dags_test("ts_inject")
    assert airflow_home.task_states("ts_inject", "retried")[-1]["tries"] == [1, 2, 3]
    # Each try's write names that try, in the history and as the key's last writer.
    with airflow_home.store() as store:
        entries = list(store.entries(task_prefix("ts_inject")))
        (scope,) = {s for s, e in entries if isinstance(s, TaskScope) and s.task_id == "retried"}
        state = store.task_state(scope)
        writers = [v.updated_by for v in state.history("tries")]
        assert [w and w.get("try_number") for w in writers] == [3, 2, 1], writers
        assert writers[0] == {
            "kind": "task", "dag_id": "ts_inject", "run_id": scope.run_id, "task_id": "retried",
            "map_index": -1, "try_number": 3,
        }  # fmt: skip
        assert state.entry("tries").updated_by == writers[0]  # type: ignore[union-attr]
        # An asset a task wrote names that task's try (one_asset ran once: try 1).
        assets = [e.updated_by or {} for _, e in store.entries(ASSET_PREFIX)]
        ours = [w for w in assets if w.get("dag_id") == "ts_inject"]
        assert len(ours) == 2 and all(w["try_number"] == 1 for w in ours), assets


def test_map_indices_are_isolated(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    if not airflow_home.task_states("ts_inject", "mapped"):
        airflow_home.dags_test("ts_inject")
    states = airflow_home.task_states("ts_inject", "mapped")
    assert states == {i: {"before": "none", "x": x} for i, x in enumerate("pqr")}


def test_tasks_test_path(airflow_home: AirflowHome) -> None:
    with airflow_home.store() as store:
        store.backend.clear_prefix(task_prefix("ts_inject"))
    airflow_home.airflow("tasks", "test", "ts_inject", "classic", DATE)
    assert airflow_home.task_states("ts_inject", "classic") == {-1: {"seen": {"classic": True}}}


def test_rerun_starts_over_unless_kept_and_reexpansion_starts_over(
    airflow_home: AirflowHome, dag_runs: dict[str, str]
) -> None:
    # The first run (DAG_RUNS): TS_ITEMS ["a", "b"].
    (run_id,) = airflow_home.run_ids("ts_rerun")
    before = airflow_home.task_states("ts_rerun", "fresh")[-1]["max_tries"]
    airflow_home.airflow("tasks", "clear", "ts_rerun", "--yes")
    if airflow_home.version in ("3.0", "3.1"):
        # Their `tasks test` cannot start a task of a cleared run (its start_date is None,
        # which their TIRunContext rejects); a scheduler sets it when the run starts again.
        with sqlite3.connect(airflow_home.home / "airflow.db") as db:
            db.execute(
                "UPDATE dag_run SET start_date = COALESCE(queued_at, logical_date)"
                " WHERE dag_id = 'ts_rerun' AND start_date IS NULL"
            )
    # The re-run, one task instance at a time; meanwhile the mapped list changed at index 0.
    changed = {"TS_ITEMS": json.dumps(["x", "b"])}
    logs = {}
    for task_id, map_index in (("fresh", -1), ("kept", -1), ("work", 0), ("work", 1)):
        logs[task_id, map_index] = airflow_home.airflow(
            "tasks", "test", "ts_rerun", task_id, run_id, "--map-index", str(map_index), env=changed
        )
    # The re-expansion says so in the task's log; the unchanged index keeps its state quietly.
    reexpanded = "taskstate: starting this task's state over: map index 0 now holds a different"
    assert reexpanded in logs["work", 0], logs["work", 0][-3000:]
    assert "starting this task's state over" not in logs["work", 1]
    after = before + 1  # cleared after try 1: max_tries = 1 + retries (0)
    assert airflow_home.task_states("ts_rerun", "fresh") == {-1: {"runs": 1, "max_tries": after}}
    assert airflow_home.task_states("ts_rerun", "kept") == {-1: {"runs": 2, "max_tries": after}}
    # Index 0 now holds "x", not "a": its old state was another item's, so it starts over
    # even though the task keeps state on clear. Index 1 holds "b" again: kept.
    assert airflow_home.task_states("ts_rerun", "work") == {
        0: {"first_item": "x", "runs": 1, "max_tries": after},
        1: {"first_item": "b", "runs": 2, "max_tries": after},
    }


def test_clear_on_success(airflow_home: AirflowHome) -> None:
    airflow_home.dags_test(
        "ts_clear_on_success",
        env={"AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS": "True"},
        expect="failed",
    )
    assert airflow_home.task_states("ts_clear_on_success", "succeeds") == {}
    assert airflow_home.task_states("ts_clear_on_success", "fails") == {-1: {"k": 1}}
    with airflow_home.store() as store:  # the clear is the task's own write, by its try
        (run_id,) = airflow_home.run_ids("ts_clear_on_success")
        versions = store.task_state(TaskScope("ts_clear_on_success", run_id, "succeeds")).history(
            "k"
        )
        assert [(v.op, (v.updated_by or {}).get("try_number")) for v in versions] == [
            ("clear", 1),
            ("set", 1),
        ]


def test_example_etl_with_checkpoint(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    run_id = airflow_home.finished_run_id("etl_with_checkpoint", dag_runs["etl_with_checkpoint"])
    assert airflow_home.task_states("etl_with_checkpoint", "process_records", run_id) == {
        -1: {"last_cursor": 20}
    }


def test_example_process_partition(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    assert airflow_home.task_states("process_partitions", "process_partition") == {
        i: {"cursor": 5, "partition_id": i} for i in range(4)
    }


def test_example_asset_producer_and_consumer(
    airflow_home: AirflowHome, dag_runs: dict[str, str]
) -> None:
    output = dag_runs["consumer"]  # after "producer", in the same process
    with airflow_home.store() as store:
        assets = {
            row.namespace: json.loads(row.value)
            for row in store.backend.scan("a\x1f")
            if row.key == "last_run_summary"
        }
    (summary,) = assets.values()
    assert summary["rows_loaded"] == 3
    assert "Processing 3 rows up to" in output


def test_example_my_batch_operator(airflow_home: AirflowHome, dag_runs: dict[str, str]) -> None:
    (nightly,) = airflow_home.task_states("batch_jobs", "nightly").values()
    assert isinstance(nightly["batch_job_id"], int)
    # durable=False through .partial(): no state at all.
    assert airflow_home.task_states("batch_jobs", "per_region") == {}
    with sqlite3.connect(airflow_home.home / "local_jobs.db") as db:
        names = sorted(name for (name,) in db.execute("SELECT name FROM jobs"))
    assert names == ["eu", "nightly-aggregate", "us"]


def test_doctor_reports_the_injection_and_fails_on_sqlite_with_celery(
    airflow_home: AirflowHome,
) -> None:
    checks = airflow_home.doctor(env={"AIRFLOW__CORE__EXECUTOR": "CeleryExecutor"})
    assert checks["airflow"] == ("ok", f"Airflow {airflow_home.airflow_version}")
    assert checks["state store in charge"][1].startswith("taskstate")
    assert checks["injection"][0] == "ok"
    status, detail = checks["executor CeleryExecutor"]
    assert status == "fail" and "[state_store] taskstate_url" in detail
    assert "postgresql://" in detail and "http(s)://" in detail
    local = {c: s for c, (s, _) in airflow_home.doctor().items() if c.startswith("executor")}
    assert list(local.values()) == ["ok"], local
