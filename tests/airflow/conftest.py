"""tests/airflow runs real Airflow; scripts/test-airflow.sh picks the versions
(TASKSTATE_AIRFLOW_VERSIONS) and runs these tests. Without that variable they are skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.airflow.deployment import Deployments
from tests.airflow.harness import (
    DATE,
    EXAMPLE_DAGS,
    MIGRATE_TIMEOUT,
    TEST_DAGS,
    AirflowHome,
    DagsTest,
    not_selected,
    pinned,
    versions,
)

DAG_FILES = [*sorted(TEST_DAGS.glob("*.py")), *sorted(EXAMPLE_DAGS.glob("*.py"))]


# Each running deployment costs the lane CPU (a scheduler, an api-server and a DAG processor
# polling on a 2-core machine): its users run first, and it stops right after its last one.
_last_user: dict[str, str] = {}  # version -> node id of the last test that may use it
_pool: list[Deployments] = []


@pytest.hookimpl(trylast=True)  # after pytest's own ordering (by fixture scope and parameter)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not versions():
        skip = pytest.mark.skip(reason="real Airflow: run scripts/test-airflow.sh")
        for item in items:
            if item.get_closest_marker("airflow"):
                item.add_marker(skip)
        return
    known = set(pinned())
    # Whichever test first needs a version's Airflow home waits for its template database
    # before its own waits: one without an explicit timeout gets the suite's default plus that.
    timeout = pytest.mark.timeout(float(items[0].config.getini("timeout")) + MIGRATE_TIMEOUT)
    for item in items:
        if item.get_closest_marker("airflow") and not item.get_closest_marker("timeout"):
            item.add_marker(timeout)

    def named(item: pytest.Item) -> set[str]:
        params = getattr(getattr(item, "callspec", None), "params", {})
        return {v for v in params.values() if isinstance(v, str) and v in known}

    # One deployment at a time: the users of each version together (those naming none first),
    # so a deployment runs only while its own tests do, not through other versions' tests.
    rank = {version: n for n, version in enumerate(versions())}
    users = [i for i in items if "deployments" in getattr(i, "fixturenames", ())]
    users.sort(key=lambda i: min((rank.get(v, len(rank)) for v in named(i)), default=-1))
    items[:] = users + [i for i in items if i not in users]
    _last_user.clear()
    for item in users:
        # A test whose parameters name no version may use any: it keeps them all running.
        for version in named(item) or versions():
            _last_user[version] = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        for version, nodeid in _last_user.items():
            if nodeid == item.nodeid and _pool:
                _pool[0].stop(version)


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


# The `airflow dags test` runs that test_dags.py and test_executors.py read, all in one process
# per version (AirflowHome.dags_tests): each is a fresh run of its DAG, in a process that has
# run others before it. Runs whose claim needs taskstate settings of their own (its store is
# per process) start their own process instead.
DAG_RUNS: dict[str, DagsTest] = {
    "ts_inject": ("ts_inject", None, {}, "success"),
    "ts_rerun": ("ts_rerun", DATE, {"TS_ITEMS": '["a", "b"]'}, "success"),
    "etl_with_checkpoint": ("etl_with_checkpoint", None, {}, "success"),
    "process_partitions": ("process_partitions", None, {}, "success"),
    "producer": ("producer", None, {}, "success"),
    "consumer": ("consumer", None, {}, "success"),
    "batch_jobs": ("batch_jobs", None, {}, "success"),
    # test_executors.py: not refused under a distributed executor's config.
    "etl_under_celery": (
        "etl_with_checkpoint", "2025-03-03", {"AIRFLOW__CORE__EXECUTOR": "CeleryExecutor"},
        "success",
    ),
}  # fmt: skip
_made: dict[tuple[str, str], dict[str, str]] = {}  # (version, name) -> {run: output}


def _runs_made(home: AirflowHome, name: str, runs: dict[str, DagsTest]) -> dict[str, str]:
    """The output of each of `runs`' `dags test` in `home`, all run on first use."""
    if (home.version, name) not in _made:
        outputs = home.dags_tests(runs.values())
        _made[home.version, name] = dict(zip(runs, outputs, strict=True))
    return _made[home.version, name]


@pytest.fixture
def dag_runs(airflow_home: AirflowHome) -> dict[str, str]:
    """DAG_RUNS' outputs in `airflow_home`."""
    return _runs_made(airflow_home, "DAG_RUNS", DAG_RUNS)


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


# The same for Airflow 3.3+'s own store (test_coexistence.py, test_native_mode.py): its store
# is Airflow's, so one process may run them all.
NATIVE_RUNS: dict[str, DagsTest] = {
    "ts_coexist": ("ts_coexist", None, {}, "success"),
    **{
        dag_id: (dag_id, None, {}, "success")
        for dag_id in ("etl_with_checkpoint", "process_partitions", "producer", "consumer",
                       "batch_jobs")
    },
    "ts_mode": ("ts_mode", None, {}, "failed"),  # native mode: a taskstate-only method fails
}  # fmt: skip


@pytest.fixture
def native_runs(native_home: AirflowHome) -> dict[str, str]:
    """NATIVE_RUNS' outputs in `native_home`."""
    return _runs_made(native_home, "NATIVE_RUNS", NATIVE_RUNS)


@pytest.fixture(scope="session")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployments]:
    """Running Airflow deployments (api-server/webserver + scheduler + plugin), one per version,
    started on first use and shared by every test of the session (tests/airflow/deployment.py)."""
    pool = Deployments(tmp_path_factory.mktemp("deployments"))
    _pool[:] = [pool]
    yield pool
    pool.stop_all()
    _pool.clear()
