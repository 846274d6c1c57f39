"""tests/airflow runs real Airflow; scripts/test-airflow.sh picks the versions
(TASKSTATE_AIRFLOW_VERSIONS) and runs these tests. Without that variable they are skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.airflow.deployment import Deployments
from tests.airflow.harness import (
    EXAMPLE_DAGS,
    TEST_DAGS,
    AirflowHome,
    not_selected,
    pinned,
    versions,
)

DAG_FILES = [*sorted(TEST_DAGS.glob("*.py")), *sorted(EXAMPLE_DAGS.glob("*.py"))]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if versions():
        return
    skip = pytest.mark.skip(reason="real Airflow: run scripts/test-airflow.sh")
    for item in items:
        if item.get_closest_marker("airflow"):
            item.add_marker(skip)


def _below_33(version: str) -> bool:
    return tuple(map(int, version.split("."))) < (3, 3)


def supported() -> list[str]:
    """The versions taskstate injects into (3.3+ has its own store)."""
    return [v for v in versions() if _below_33(v)]


@pytest.fixture(scope="session", params=supported() or ["none"])
def airflow_home(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowHome]:
    version = request.param
    if version == "none":
        pytest.skip(not_selected(v for v in pinned() if _below_33(v)))
    yield AirflowHome(version, tmp_path_factory.mktemp(f"airflow-{version}"), DAG_FILES)


def native() -> list[str]:
    """The selected versions with Airflow's own store (3.3+)."""
    return [v for v in versions() if not _below_33(v)]


@pytest.fixture(scope="session", params=native() or ["none"])
def native_home(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowHome]:
    """One Airflow 3.3+ home (SQLite) shared by every test of the native store."""
    if request.param == "none":
        pytest.skip(not_selected(v for v in pinned() if not _below_33(v)))
    yield AirflowHome(request.param, tmp_path_factory.mktemp(f"airflow-{request.param}"), DAG_FILES)


@pytest.fixture(scope="session")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployments]:
    """Running Airflow deployments (api-server/webserver + scheduler + plugin), one per version,
    started on first use and shared by every test of the session (tests/airflow/deployment.py)."""
    pool = Deployments(tmp_path_factory.mktemp("deployments"))
    yield pool
    pool.stop_all()
