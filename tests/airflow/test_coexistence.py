"""Airflow 3.3+: its own store stays in charge. taskstate injects nothing, and DAG code written
against taskstate (the example DAGs, `from taskstate import NEVER_EXPIRE`) runs unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.airflow.harness import AirflowHome

pytestmark = pytest.mark.airflow


def test_native_store_in_charge_and_never_expire_equal(
    native_home: AirflowHome, native_runs: dict[str, str]
) -> None:
    report = json.loads((native_home.home / "coexist.json").read_text())
    assert report["store_module"].startswith("airflow.")
    assert report["never_expire_equal"] is True
    assert report["get"] == 1


@pytest.mark.parametrize(
    "dag_id", ["etl_with_checkpoint", "process_partitions", "producer", "consumer", "batch_jobs"]
)
def test_examples_run_unchanged(
    native_home: AirflowHome, native_runs: dict[str, str], dag_id: str
) -> None:
    assert dag_id in native_runs  # run, and succeeded (conftest.py's NATIVE_RUNS)
    # Nothing went to taskstate's own file: no double injection.
    db = Path(native_home.home, "taskstate.db")
    assert not db.exists() or not list(native_home.store().backend.scan())


def test_doctor_says_the_native_store_is_in_charge(native_home: AirflowHome) -> None:
    status, detail = native_home.doctor()["state store in charge"]
    assert status == "ok" and detail.startswith("Airflow's own")
