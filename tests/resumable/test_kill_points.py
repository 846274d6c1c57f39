"""Every kill point, every way of handling the token: how many jobs the job system ran, what
the task returned, and what the retry decided. Real SQLite store, real job system worker,
real SIGKILL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from .driver import (
    DEFERRABLE_KILL_POINTS,
    KILL_POINTS,
    SYSTEMS,
    Env,
    run_deferrable_scenario,
    run_scenario,
)
from .jobsystem import JobSystem

# Kill points where the job system may already hold the job but the store has no id for it.
WINDOW = {"after_accept", "before_persist"}

RETRY_DECISIONS = {
    "start": {"fresh_submit"},
    "before_submit": {"recover_from_intent", "fresh_submit"},
    "after_accept": {"recover_from_intent", "reconnect", "already_succeeded"},
    "before_persist": {"recover_from_intent", "reconnect", "already_succeeded"},
    "during_poll": {"reconnect", "already_succeeded"},
    "after_success": {"already_succeeded"},
}


@pytest.mark.parametrize("kill_at", KILL_POINTS)
@pytest.mark.parametrize("system", ["client-token", "find_job"])
def test_one_job_and_the_right_result_whatever_the_kill_point(
    any_env: Env, jobs: JobSystem, system: str, kill_at: str
) -> None:
    scenario = run_scenario(any_env, jobs, SYSTEMS[system], kill_at=kill_at)
    killed, retry = scenario.tries[0], scenario.tries[1]
    assert killed.killed_at == kill_at
    assert retry.decision in RETRY_DECISIONS[kill_at]
    assert scenario.working_jobs == 1, scenario.jobs
    assert scenario.result_correct, scenario.final
    assert len(scenario.tries) == 2


@pytest.mark.parametrize("kill_at", ["after_accept", "before_persist"])
def test_find_job_recovers_the_id_lost_in_the_window(env: Env, jobs: JobSystem, kill_at: str):
    scenario = run_scenario(env, jobs, SYSTEMS["find_job"], kill_at=kill_at)
    retry = scenario.tries[1]
    assert retry.recovered
    assert retry.decision in {"reconnect", "already_succeeded"}
    assert scenario.submissions == 1


@pytest.mark.parametrize("kill_at", ["after_accept", "before_persist"])
def test_client_token_dedupes_the_resubmission(env: Env, jobs: JobSystem, kill_at: str) -> None:
    scenario = run_scenario(env, jobs, SYSTEMS["client-token"], kill_at=kill_at)
    assert scenario.tries[1].decision == "recover_from_intent"
    first, second = jobs.submissions_for(scenario.logical)
    assert first.token is not None and second.token == first.token
    assert (first.deduped, second.deduped) == (False, True)
    assert second.job_id == first.job_id


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_without_token_or_find_job_only_the_window_duplicates(
    env: Env, jobs: JobSystem, kill_at: str
) -> None:
    scenario = run_scenario(env, jobs, SYSTEMS["no-token"], kill_at=kill_at)
    assert scenario.result_correct
    assert scenario.working_jobs == (2 if kill_at in WINDOW else 1), scenario.jobs


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_fail_policy_stops_for_a_person_instead_of_duplicating(
    env: Env, jobs: JobSystem, kill_at: str
) -> None:
    scenario = run_scenario(env, jobs, SYSTEMS["no-token+fail"], kill_at=kill_at)
    assert scenario.working_jobs <= 1
    if kill_at in WINDOW | {"before_submit"}:
        assert scenario.lost, scenario.final
        assert scenario.tries[1].decision == "recover_from_intent"
    else:
        assert scenario.result_correct


def test_a_failed_job_is_resubmitted_with_a_new_token(env: Env, jobs: JobSystem) -> None:
    scenario = run_scenario(
        env, jobs, SYSTEMS["client-token"], kill_at="during_poll", fail_first=True
    )
    decisions = [t.decision for t in scenario.tries]
    assert decisions[1] == "reconnect" or decisions[1] == "terminal_resubmit"
    assert "terminal_resubmit" in decisions
    assert [state for _, state in scenario.jobs] == ["FAILED", "SUCCEEDED"]
    tokens = [s.token for s in jobs.submissions_for(scenario.logical)]
    assert len(set(tokens)) == 2
    assert scenario.result_correct


def test_two_kills_in_a_row(env: Env, jobs: JobSystem) -> None:
    scenario = run_scenario(env, jobs, SYSTEMS["client-token"], kill_at="after_accept", kills=2)
    assert [t.killed_at for t in scenario.tries[:2]] == ["after_accept", "after_accept"]
    assert scenario.working_jobs == 1
    assert scenario.result_correct


def test_random_time_kills_smoke(env: Env, jobs: JobSystem) -> None:
    """A few random-moment kills (the bench runs 500): never a second working job. Each job
    runs 0.5 s, far longer than the latest kill (80 ms), so every kill lands."""
    import random

    rng = random.Random(7)
    for _ in range(6):
        scenario = run_scenario(
            replace(env, run_for=0.5),
            jobs,
            SYSTEMS["client-token"],
            kill_after=rng.uniform(0.0, 0.08),
        )
        assert scenario.tries[0].killed_at == "random_time", scenario.tries  # the kill landed
        assert scenario.working_jobs == 1
        assert scenario.result_correct


@pytest.mark.parametrize("kill_at", ["after_accept", "before_persist", "during_poll"])
def test_airflow_332_baseline_duplicates_in_the_window_and_loses_the_result(
    env: Env, jobs: JobSystem, kill_at: str
) -> None:
    """What we fix, measured on a step-for-step copy of Airflow 3.3.2's algorithm: a kill in
    the submit→persist window runs the job twice; a reconnect returns None, not the result."""
    # A 0.5 s job is still running when the retry starts, so a poll-killed try reconnects.
    scenario = run_scenario(
        replace(env, run_for=0.5), jobs, SYSTEMS["airflow-3.3.2"], kill_at=kill_at
    )
    assert scenario.tries[0].killed_at == kill_at
    if kill_at == "during_poll":
        assert scenario.working_jobs == 1
        assert scenario.tries[1].decision == "reconnect"
        assert scenario.final.result is None
    else:
        assert scenario.working_jobs == 2
        assert scenario.result_correct


DEFERRED_RETRY_DECISIONS = {
    "start": {"fresh_submit"},
    "before_submit": {"recover_from_intent", "fresh_submit"},
    "after_accept": {"recover_from_intent", "reconnect", "already_succeeded"},
    "before_persist": {"recover_from_intent", "reconnect", "already_succeeded"},
    "before_defer": {"reconnect", "already_succeeded"},
    "during_complete": {"already_succeeded"},
}


@pytest.mark.parametrize("kill_at", DEFERRABLE_KILL_POINTS)
@pytest.mark.parametrize("system", ["client-token", "find_job"])
def test_deferrable_one_job_and_the_right_result_whatever_the_kill_point(
    any_env: Env, jobs: JobSystem, system: str, kill_at: str
) -> None:
    """Worker, triggerer or `execute_complete` SIGKILLed: one job, its result, and a retry
    that defers on (or returns) the job it finds instead of submitting."""
    # A trigger polls only while the job runs: give it a job that outlives a loaded fork.
    env = replace(any_env, run_for=1.0) if kill_at == "during_trigger" else any_env
    scenario = run_deferrable_scenario(env, jobs, SYSTEMS[system], kill_at=kill_at)
    killed = [i for i, t in enumerate(scenario.tries) if t.killed_at is not None]
    assert [scenario.tries[i].killed_at for i in killed] == [kill_at], scenario.tries
    assert scenario.working_jobs == 1, scenario.jobs
    assert scenario.result_correct, scenario.final
    later = [t.decision for t in scenario.tries[killed[0] + 1 :] if t.decision is not None]
    if kill_at == "during_trigger":
        # the triggerer's death spends no try: a new trigger polls the same job
        assert later == [] and scenario.tries[killed[0] + 1].event is not None
        assert scenario.submissions == 1
    else:
        assert later[0] in DEFERRED_RETRY_DECISIONS[kill_at], scenario.tries
    if kill_at in ("before_defer", "during_complete"):
        assert scenario.submissions == 1


def test_deferrable_failed_job_is_resubmitted_once_under_a_new_token(
    env: Env, jobs: JobSystem
) -> None:
    scenario = run_deferrable_scenario(
        replace(env, run_for=1.0),
        jobs,
        SYSTEMS["client-token"],
        kill_at="during_trigger",
        fail_first=True,
    )
    assert [state for _, state in scenario.jobs] == ["FAILED", "SUCCEEDED"]
    assert "terminal_resubmit" in [t.decision for t in scenario.tries]
    assert len({s.token for s in jobs.submissions_for(scenario.logical)}) == 2
    assert scenario.result_correct


def test_deferrable_without_token_only_the_window_duplicates(env: Env, jobs: JobSystem) -> None:
    """The same baseline as the blocking path: no token and no find_job leave the submit
    window open (this is what the token or find_job closes); every other point is safe."""
    for kill_at in DEFERRABLE_KILL_POINTS:
        scenario = run_deferrable_scenario(
            replace(env, run_for=1.0) if kill_at == "during_trigger" else env,
            jobs,
            SYSTEMS["no-token"],
            kill_at=kill_at,
        )
        assert scenario.result_correct, (kill_at, scenario.final)
        assert scenario.working_jobs == (2 if kill_at in WINDOW else 1), (kill_at, scenario.jobs)
