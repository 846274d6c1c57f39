"""Real Airflow, real scheduler and triggerer: a ResumableJobMixin task SIGKILLs its own task
process (after the job system accepted the job, or while polling it; on the deferrable path
also after saving the id before defer(), and in execute_complete), or the test SIGKILLs the
triggerer while a trigger polls; the next try (or the next triggerer) must reconnect to that
job — one job per task — and return its result. On 3.2 the same deployment runs upstream
provider operators with `[state_store] taskstate_provider_durable` on (tests/airflow/
test_provider_durable.py has the rest of that setting's tests) against moto's server.

One deployment per version, shared by both tests: Airflow 2.10 (scheduler + triggerer +
SequentialExecutor), 3.2 and 3.3 in taskstate mode (api-server, dag-processor, scheduler,
triggerer + LocalExecutor), each on a throwaway AIRFLOW_HOME with SQLite; one DAG run per test
(the blocking one with a task per kill point, the deferrable one with its five kill points in
two tasks, each try dying at the next point). The deployment code is bench/versus's
(`versus.scheduler.Deployment`), the job system is tests/resumable's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.airflow import test_provider_durable as provider
from tests.airflow.harness import NO_REPARSE, copy_migrated_db
from tests.aws_server import running_aws

# Its own waits: the api-server 180 s, the run 900 s, stopping 30 s.
pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
DAGS = [
    Path(__file__).with_name("resumable_dags") / name
    for name in ("ts_resumable_kill.py", "ts_deferrable_kill.py")
]
WATCHER = Path(__file__).with_name("resumable_dags") / "ts_watcher.py"  # Airflow 3 only
JOBSYSTEM = REPO / "tests" / "resumable" / "jobsystem.py"
# Real Airflow runs only when scripts/test-airflow.sh (or a person) picks versions.
SELECTED = os.environ.get("TASKSTATE_AIRFLOW_VERSIONS", "").split()


def _jobsystem() -> Any:
    spec = importlib.util.spec_from_file_location("kill_jobsystem", JOBSYSTEM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Live:
    """One started deployment of a version (scheduler, triggerer, LocalExecutor on 3.x,
    SequentialExecutor on 2.x) shared by this module's tests, and the job system."""

    version: str
    deployment: Any
    jobs: Any
    jobsystem: Any
    out: Path
    aws: Any = None  # moto's server the provider DAG's tasks call (3.2 only)


@contextlib.contextmanager
def kill_deployment(
    version: str, root: Path, extra_dags: Sequence[Path] = (), extra_env: Mapping[str, str] = {}
) -> Iterator[Live]:
    """A started deployment of `version` with these DAGs (and `extra_dags`), a triggerer and
    the job system, under `root` (also bench/deferrable_scheduler.py's)."""
    sys.path.insert(0, str(REPO / "bench"))
    from versus.envs import AirflowHome, Side
    from versus.scheduler import Deployment

    side = Side(f"mixin kill test {version}", version, taskstate=True)
    side.prepare()
    home = AirflowHome(side, root / "home", migrated=copy_migrated_db)
    (home.root / "dags").joinpath("versus_dags.py").unlink()
    for dag in [*(DAGS if side.airflow_major == 2 else [*DAGS, WATCHER]), *extra_dags]:
        shutil.copy(dag, home.root / "dags")
    out = root / "out"
    out.mkdir()
    jobsystem = _jobsystem()
    extra = {
        "RESUMABLE_JOBSYSTEM": str(JOBSYSTEM),
        "RESUMABLE_JOBS_DB": str(root / "jobs.db"),
        # The triggerer imports a trigger by its classpath; Airflow 3 does not put the DAG
        # folder on sys.path there, so the trigger's module must be importable by itself.
        "PYTHONPATH": str(home.root / "dags"),
        **NO_REPARSE,
        **extra_env,
    }
    if version == "3.3":  # taskstate in charge on 3.3 (its own store otherwise)
        extra["AIRFLOW__STATE_STORE__TASKSTATE_MODE"] = "taskstate"
    with jobsystem.running_jobsystem(root / "jobs.db") as jobs:
        deployment = Deployment(home, out, extra, triggerer=True)
        if side.airflow_major == 2:  # Airflow 2 runs LocalExecutor on PostgreSQL/MySQL only
            deployment.env["AIRFLOW__CORE__EXECUTOR"] = "SequentialExecutor"
        with deployment:
            yield Live(version, deployment, jobs, jobsystem, out)


@pytest.fixture(scope="module", params=["2.10", "3.2", "3.3"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    version = request.param
    if version not in SELECTED:
        pytest.skip(f"Airflow {version} not selected (TASKSTATE_AIRFLOW_VERSIONS)")
    root = tmp_path_factory.mktemp(f"kill-{version}")
    if version != "3.2":
        with kill_deployment(version, root) as started:
            yield started
        return
    # 3.2 also runs the provider DAG: one deployment, not one more for that test alone.
    with running_aws(root) as aws:
        env = {
            "AIRFLOW_CONN_AWS_DEFAULT": aws.airflow_connection(),
            "TS_PROVIDER_FAULT": "kill",
            provider.SETTING: "True",
        }
        with kill_deployment(version, root, [provider.DAG_FILE], env) as started:
            started.aws = aws
            yield started


@pytest.mark.parametrize("live", ["2.10", "3.3"], indirect=True)  # one Airflow 2, one 3
def test_try_1_killed_the_retry_reconnects_to_the_one_job(live: Live) -> None:
    jobs, jobsystem = live.jobs, live.jobsystem
    reports = {r["task_id"]: r for r in live.deployment.run("ts_resumable_kill", tasks=3)}
    created = {task: jobs.jobs_for(r["logical"]) for task, r in reports.items()}
    submits = {task: len(jobs.submissions_for(r["logical"])) for task, r in reports.items()}
    for task, report in reports.items():
        assert report["try_number"] == 2, report  # try 1 died
        assert len(created[task]) == 1, (task, created[task])
        assert report["result"] == {
            "job_id": created[task][0][0],
            "output": jobsystem.expected_output(report["logical"]),
        }
    assert reports["client_token"]["decision"] == "recover_from_intent"
    assert submits["client_token"] == 2  # the resubmission carried the token and was deduped
    assert reports["find_job"]["recovered"] is True
    assert submits["find_job"] == 1
    assert reports["during_poll"]["decision"] in {"reconnect", "already_succeeded"}
    assert submits["during_poll"] == 1


# Airflow's own known race, apache/airflow#71580 and #72716 (open; 3.2.x and 3.3.2 alike): the
# executor's success for the worker that exited on defer() can reach the scheduler after the
# trigger fired and the resumed attempt was queued or started; the scheduler then records a
# "state mismatch" and fails that try, before execute_complete runs. It fails a try, not the
# job: the next try must reconnect like after any other crash. Our own SIGKILLs are recorded
# the same way (the task's supervisor exits cleanly), so the test counts the mismatches of
# tries it did not kill, from Airflow's audit log, and allows exactly that many more tries.
STATE_MISMATCH = "SELECT try_number FROM log WHERE event = 'state mismatch' AND task_id = ?"
DONE = ("already_succeeded",)  # what a try after the job succeeded decides


@pytest.mark.parametrize("live", ["2.10", "3.2", "3.3"], indirect=True)
def test_deferrable_worker_and_triggerer_kills_leave_one_job_each(live: Live) -> None:
    """Every kill point of the deferrable flow, two tasks. `accept_then_complete`: try 1 dies
    after the job system accepted the job (id not saved), try 2 recovers it from the intent and
    defers, its execute_complete dies with the result in hand, try 3 returns it.
    `defer_then_trigger`: try 1 dies after saving the id, before defer(); try 2 reconnects to the
    (held) job and defers; the triggerer is SIGKILLed while that trigger polls and a new one
    takes it over, resuming the stored poll count (at most one poll repeated) without spending a
    try. One job per task, its result returned."""
    deployment, out, jobs = live.deployment, live.out, live.jobs
    killed: list[int] = []  # polls logged when the triggerer was killed
    released: list[str] = []

    def polls() -> list[int]:
        path = out / f"{run_id}.defer_then_trigger.polls"
        return [int(n) for n in path.read_text().split()] if path.exists() else []

    def meanwhile() -> None:
        if not killed and (out / f"{run_id}.defer_then_trigger.kill-triggerer").exists():
            killed.append(len(polls()))
            deployment.kill_triggerer()
        elif killed and not released and len(polls()) > killed[0]:
            # The re-created trigger has polled the still-running job: let it finish.
            released.append(f"{run_id}/defer_then_trigger")
            jobs.release(released[0])

    run_id = deployment.start_run("ts_deferrable_kill")
    reports = {
        r["task_id"]: r
        for r in deployment.finish("ts_deferrable_kill", run_id, tasks=2, meanwhile=meanwhile)
    }
    assert killed and released, "the triggerer was never killed while the trigger polled"
    expected = {
        "accept_then_complete": (
            ["1 fresh_submit", "2 recover_from_intent", "3 already_succeeded"],
            ["1 after_accept", "2 during_complete"],
        ),
        "defer_then_trigger": (["1 fresh_submit", "2 reconnect"], ["1 before_defer"]),
    }
    for task, (decided, kills) in expected.items():
        report = reports[task]
        created = jobs.jobs_for(report["logical"])
        assert len(created) == 1, (task, created)
        assert report["result"] == {
            "job_id": created[0][0],
            "output": live.jobsystem.expected_output(report["logical"]),
        }, task
        decisions = (out / f"{run_id}.{task}.decisions").read_text().splitlines()
        died = (out / f"{run_id}.{task}.kills").read_text().splitlines()
        ours = {int(line.split()[0]) for line in died}
        extra = sum(t not in ours for (t,) in deployment.home.query(STATE_MISMATCH, task))
        assert decisions[: len(decided)] == decided, (task, decisions)
        later = decisions[len(decided) :]
        assert len(later) <= extra and all(d.endswith(DONE) for d in later), (task, decisions)
        assert died == kills or (extra and kills[: len(died)] == died), (task, died)
        assert len(decided) <= report["try_number"] <= len(decided) + extra, (task, report)
    submitted = jobs.submissions_for(reports["accept_then_complete"]["logical"])
    assert [s.deduped for s in submitted] == [False, True]  # try 2 resent try 1's token
    seen = polls()
    assert seen == sorted(seen) and len(seen) - len(set(seen)) <= 1, seen  # went on from state
    assert len(seen) > killed[0], seen  # the re-created trigger polled
    assert reports["defer_then_trigger"]["polls"] == seen[-1]


@pytest.mark.parametrize("live", ["3.2", "3.3"], indirect=True)
def test_a_watcher_killed_right_after_yielding_makes_no_duplicate_event(live: Live) -> None:
    """The documented watcher recipe under a real triggerer: the triggerer dies right after
    the watcher yielded event 1 (and Airflow recorded it); the watcher re-created on a new
    triggerer yields event 2 and never event 1 again: one asset event each, so no second
    DAG run for event 1."""
    deployment, out = live.deployment, live.out
    home = deployment.home

    def events() -> list[int]:
        rows = home.query("SELECT extra FROM asset_event")
        return sorted(json.loads(r[0]).get("payload", {}).get("event_id", -1) for r in rows)

    def wait(check: Any, what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"{what}; logs in {home.root}"
            time.sleep(1)

    (out / "orders.events").write_text("1\n")
    wait((out / "watcher.kill-triggerer").exists, "the watcher never yielded event 1")
    wait(lambda: events() == [1], "Airflow never recorded event 1")
    deployment.kill_triggerer()
    (out / "orders.events").write_text("1\n2\n")
    wait(lambda: 2 in events(), "the re-created watcher never yielded event 2")
    time.sleep(5)  # a duplicate of event 1 would have been yielded before event 2
    assert events() == [1, 2]
    wait(
        lambda: (
            home.query(
                "SELECT count(*) FROM dag_run WHERE dag_id = 'ts_watcher' AND state = 'success'"
            )[0][0]
            >= 1
        ),
        "no ts_watcher run succeeded",
    )


@pytest.mark.parametrize("live", ["3.2"], indirect=True)
def test_sigkilled_provider_operators_resume_with_the_setting(live: Live) -> None:
    """Amazon's `RedshiftDataOperator` and `GlueJobOperator` with the setting on: try 1 of each
    task is SIGKILLed after the job id is persisted or while polling; the retry reconnects, and
    the service saw one job per task."""
    run = live.deployment.run(provider.DAG_ID, tasks=len(provider.TASKS))
    reports = {r["task_id"]: r for r in run}
    jobs = provider.by_task(live.aws.submissions())
    for task in provider.TASKS:
        report = reports[task]
        assert report["try_number"] == 2, report  # try 1 was killed
        assert (report["mixin"], report["durable"]) == (provider.TASKSTATE_MIXIN, True), report
        assert jobs[task] == 1, (task, jobs)
        assert report["stored"] is not None
    # The retry returned the result of the job try 1 submitted.
    assert reports["glue_after_persist"]["result"] == reports["glue_after_persist"]["stored"]
    assert reports["redshift_after_persist"]["result"] == [
        reports["redshift_after_persist"]["stored"]
    ]
