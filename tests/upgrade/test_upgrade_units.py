"""The parts of the upgrade tools that need no Airflow: the setting and the Variable checks."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from taskstate.airflow.variables import after, state_value, target
from taskstate.cli import main
from taskstate.errors import ConfigError
from taskstate.scope import AssetScope, TaskScope
from taskstate.settings import Settings


def test_taskstate_mode_defaults_to_native_and_is_checked() -> None:
    assert Settings.load({}).taskstate_mode == "native"
    env = {"AIRFLOW__STATE_STORE__TASKSTATE_MODE": "TaskState"}
    assert Settings.load(env).taskstate_mode == "taskstate"
    with pytest.raises(ConfigError, match=r"taskstate_mode must be one of native, taskstate"):
        Settings.load({"AIRFLOW__STATE_STORE__TASKSTATE_MODE": "both"})


@pytest.mark.parametrize(
    ("raw", "as_text", "value"),
    [
        ('"2025-01-01T00:00:00+00:00"', False, "2025-01-01T00:00:00+00:00"),
        ('{"job": 42, "ids": [1, 2]}', False, {"job": 42, "ids": [1, 2]}),
        ("2025-01-01", True, "2025-01-01"),
    ],
)
def test_variable_values_that_are_state(raw: str, as_text: bool, value: object) -> None:
    assert state_value("v", raw, as_text=as_text) == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("2025-01-01", "is not JSON .* pass --text"),
        ("{'a': 1}", "is not JSON"),
        ("null", "cannot be state"),
        ('{"rows": [1, NaN]}', r"cannot be state: .*\['rows'\]\[1\]"),
    ],
)
def test_variable_values_refused_with_the_reason(raw: str, reason: str) -> None:
    with pytest.raises(click.ClickException, match=reason):
        state_value("v", raw, as_text=False)


def test_after_shows_the_dag_change() -> None:
    asset = after(target("orders/daily", None, None, None, -1), "watermark", "orders_wm")
    assert '@task(inlets=[Asset("orders/daily")], outlets=[Asset("orders/daily")])' in asset
    assert "asset_state_store.set('watermark', new_value)" in asset
    task = after(TaskScope("etl", "r", "submit-job"), "job_id", "spark_job")
    assert "def my_task(task_state_store=None):" in task
    assert "task_state_store.set('job_id', new_value, retention=NEVER_EXPIRE)" in task
    assert isinstance(target("s3://b/k", None, None, None, -1), AssetScope)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["migrate-to-airflow", "--dry-run"], "run it where Airflow 3.3+ is installed"),
        (["clean", "--airflow-offload"], "run it where Airflow 3.3+ is installed"),
        (["variables", "migrate", "--variable", "v", "--key", "k"], "give either --to-asset"),
        (
            ["variables", "migrate", "--variable", "v", "--key", "k", "--dag-id", "d"],
            "needs all of --dag-id, --run-id and --task-id",
        ),
    ],
)
def test_upgrade_commands_refuse_clearly_without_airflow_3_3(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))  # the dev env has no Airflow
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "taskstate.db").exists()  # nothing opened, nothing written
