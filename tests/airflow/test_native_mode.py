"""Airflow 3.3+: `[state_store] taskstate_mode` picks whose accessors tasks get.

native (the default): Airflow's; a taskstate-only method fails at once, naming the method and
the setting. taskstate: taskstate's accessors are injected in place of Airflow's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.airflow.harness import AirflowHome

from taskstate import StateStore, TaskScope
from taskstate.scope import task_prefix
from taskstate.settings import Settings

pytestmark = pytest.mark.airflow


def _report(home: AirflowHome) -> dict[str, object]:
    data: dict[str, object] = json.loads((home.home / "mode.json").read_text())
    return data


def test_native_mode_names_the_method_and_the_setting(
    native_home: AirflowHome, native_runs: dict[str, str]
) -> None:
    output = native_runs["ts_mode"]  # failed (conftest.py's NATIVE_RUNS)
    assert "NativeStoreMethodError" in output
    assert "task_state_store.update" in output
    assert "[state_store] taskstate_mode = taskstate" in output
    report = _report(native_home)
    assert report["module"].startswith("airflow.")  # type: ignore[union-attr]
    assert report["has_update"] is False  # getattr(..., None) still works


def test_taskstate_mode_injects_taskstate_accessors(
    native_home: AirflowHome, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    env = {
        "AIRFLOW__STATE_STORE__TASKSTATE_MODE": "taskstate",
        "AIRFLOW__STATE_STORE__TASKSTATE_URL": url,
    }
    native_home.dags_test("ts_mode", env=env)
    report = _report(native_home)
    assert report.pop("module").startswith("taskstate.")  # type: ignore[union-attr]
    assert report == {"has_update": True, "n": 1, "cas": True}
    with StateStore(url, settings=Settings()) as store:
        (run_id,) = {
            scope.run_id
            for scope, _ in store.scopes(task_prefix("ts_mode"))
            if isinstance(scope, TaskScope)
        }
        state = store.task_state(TaskScope("ts_mode", run_id, "atomic"))
        assert dict(state.items()) == {"n": 1, "owner": "me"}
        writer = state.entry("n").updated_by  # type: ignore[union-attr]
        assert writer is not None and writer["try_number"] == 1, writer  # 3.3 injection too
    status, detail = native_home.doctor(env=env)["state store in charge"]
    assert status == "ok" and "taskstate_mode = taskstate" in detail
