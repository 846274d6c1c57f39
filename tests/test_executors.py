"""Which executor runs a task instance, and the refusal of the default SQLite file under one that
spreads tasks over machines. Real Airflow runs of the refusal are in tests/airflow/test_celery.py;
here the decision itself, with task instances shaped as Airflow 2 hands them to callbacks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from taskstate.airflow.executors import (
    check_task_store,
    configured_executors,
    executor_of,
    runs_elsewhere,
)
from taskstate.errors import ConfigError
from taskstate.settings import Settings

CELERY_PATH = "airflow.providers.celery.executors.celery_executor.CeleryExecutor"


@pytest.fixture(autouse=True)
def airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("AIRFLOW__CORE__EXECUTOR", "AIRFLOW_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("entry", "reach"),
    [
        ("CeleryExecutor", "distributed"),
        (CELERY_PATH, "distributed"),
        ("workers:" + CELERY_PATH, "distributed"),
        ("KubernetesExecutor", "distributed"),
        ("CeleryKubernetesExecutor", "distributed"),
        ("airflow.providers.edge3.executors.EdgeExecutor", "distributed"),
        ("airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor", "distributed"),
        (
            "airflow.providers.amazon.aws.executors.batch.batch_executor.AwsBatchExecutor",
            "distributed",
        ),
        ("LocalExecutor", "local"),
        ("SequentialExecutor", "local"),
        ("LocalKubernetesExecutor", "by queue"),
        ("my_company.executors.MyExecutor", "unknown"),
    ],
)
def test_reach_by_class_name(entry: str, reach: str) -> None:
    (executor,) = configured_executors(entry)
    assert executor.reach == reach


def test_multi_executor_config_the_first_is_the_default() -> None:
    configured = configured_executors(f"LocalExecutor, workers:{CELERY_PATH}")
    assert [e.name for e in configured] == ["LocalExecutor", "CeleryExecutor"]
    assert executor_of(None, configured).name == "LocalExecutor"
    # A task names its executor by alias, class name or path.
    for reference in ("workers", "CeleryExecutor", CELERY_PATH):
        assert executor_of(reference, configured).name == "CeleryExecutor"
    assert configured_executors("") == configured_executors(None) == configured_executors(" , ")


def test_local_kubernetes_spreads_only_its_kubernetes_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (executor,) = configured_executors("LocalKubernetesExecutor")
    assert runs_elsewhere(executor, "kubernetes") and not runs_elsewhere(executor, "default")
    monkeypatch.setenv("AIRFLOW__LOCAL_KUBERNETES_EXECUTOR__KUBERNETES_QUEUE", "k8s")
    assert runs_elsewhere(executor, "k8s") and not runs_elsewhere(executor, "kubernetes")


def _context(*, executor: str | None = None, raw: bool = True, test_mode: bool = False) -> Any:
    """The context Airflow 2 hands `on_execute_callback` (an executor's task runs with --raw)."""
    ti = SimpleNamespace(executor=executor, queue="default", raw=raw, test_mode=test_mode)
    return {"ti": ti, "task": SimpleNamespace(executor=executor, queue="default")}


def test_celery_task_is_refused_the_default_sqlite_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    with pytest.raises(ConfigError) as caught:
        check_task_store(_context(), Settings.load())
    message = str(caught.value)
    assert "CeleryExecutor runs tasks on several machines" in message
    assert "[state_store] taskstate_url" in message and "taskstate_token" in message


def test_per_task_executor_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", f"LocalExecutor,{CELERY_PATH}")
    settings = Settings.load()
    check_task_store(_context(), settings)  # the default executor: local
    with pytest.raises(ConfigError, match="CeleryExecutor"):
        check_task_store(_context(executor="CeleryExecutor"), settings)


def test_test_runs_are_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    settings = Settings.load()
    check_task_store(_context(raw=False), settings)  # `dags test`
    check_task_store(_context(test_mode=True), settings)  # `tasks test`


@pytest.mark.parametrize(
    "env",
    [
        {"AIRFLOW__STATE_STORE__TASKSTATE_URL": "sqlite:////shared/volume/taskstate.db"},
        {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:p@db/airflow"},
        {"AIRFLOW__STATE_STORE__BACKEND": "my.custom.Backend"},
    ],
)
def test_a_chosen_backend_is_respected(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_task_store(_context(), Settings.load())


def test_mysql_metadata_db_still_means_the_default_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "KubernetesExecutor")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "mysql://u:p@db/airflow")
    with pytest.raises(ConfigError, match="KubernetesExecutor"):
        check_task_store(_context(), Settings.load())
