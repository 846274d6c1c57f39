"""The deferrable path without Airflow: `resume_or_defer` / `complete_deferred` and the mixin's
`execute_deferrable` / `complete_deferred`, over a real SQLite store. `defer` raises, as
Airflow's `self.defer(...)` raises `TaskDeferred`; a crash is an exception that escapes the try.
The same table with real processes and SIGKILL is in test_kill_points.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from taskstate import ResumableJobMixin, ResumeAction, StateStore, TaskScope, TaskStateStore
from taskstate.errors import JobFailedError
from taskstate.resumable import (
    complete_deferred,
    decide,
    idempotency_token,
    resume_or_defer,
)

from .test_core import Service


class Deferred(Exception):
    def __init__(self, external_id: Any) -> None:
        super().__init__(external_id)
        self.external_id = external_id


class Crash(BaseException):
    """The worker dies here (escapes `except Exception`, like a SIGKILL escapes everything)."""


def bindings(state: TaskStateStore | None, service: Service, **extra: Any) -> dict[str, Any]:
    def defer(job_id: Any) -> Any:
        raise Deferred(job_id)

    return {
        "task_state_store": state,
        "external_id_key": "run_id",
        "submit": lambda: service.start(idempotency_token(state, "run_id")),
        "get_status": lambda job_id: service.jobs.get(job_id, "UNKNOWN"),
        "is_active": lambda status: status == "RUNNING",
        "is_succeeded": lambda status: status == "SUCCEEDED",
        "defer": defer,
        "get_result": lambda job_id: f"output of {job_id}",
        **extra,
    }


def completion(bound: dict[str, Any], event: Any) -> dict[str, Any]:
    """`complete_deferred`'s arguments from the same bindings."""
    names = ("task_state_store", "external_id_key", "get_status", "is_active", "is_succeeded")
    return {
        **{n: bound[n] for n in names},
        "get_result": bound["get_result"],
        "defer": bound["defer"],
        "event": event,
    }


def defer_once(bound: dict[str, Any]) -> Any:
    with pytest.raises(Deferred) as deferred:
        resume_or_defer(**bound)
    return deferred.value.external_id


@pytest.fixture
def state(store: StateStore) -> TaskStateStore:
    return store.task_state(TaskScope("dag", "run", "deferrable"))


def test_submits_saves_the_id_then_defers_and_completes_with_the_result(state) -> None:
    service = Service()
    saved_when_deferring = []

    def defer(job_id: Any) -> Any:
        saved_when_deferring.append(state.get("run_id"))
        raise Deferred(job_id)

    bound = bindings(state, service, defer=defer)
    job = defer_once(bound)
    assert job == "job-0" and saved_when_deferring == ["job-0"]
    assert service.tokens == [state.get("run_id__intent")["token"]]
    assert state.entry("run_id").expires_at is None  # NEVER_EXPIRE while the job may run
    service.wait(job)
    event = {"external_id": job, "status": "SUCCEEDED"}
    assert complete_deferred(**completion(bound, event)) == "output of job-0"
    assert state.entry("run_id").expires_at is not None  # the default retention again
    assert list(service.jobs) == ["job-0"]


def test_a_crash_between_persist_and_defer_defers_again_on_the_same_job(state) -> None:
    service = Service()

    def die(job_id: Any) -> Any:
        raise Crash

    with pytest.raises(Crash):
        resume_or_defer(**bindings(state, service, defer=die))
    assert decide(state, **checks(state, service)).action is ResumeAction.RECONNECT
    assert defer_once(bindings(state, service)) == "job-0"
    assert list(service.jobs) == ["job-0"] and len(service.tokens) == 1


def test_a_job_that_succeeded_meanwhile_returns_its_result_without_deferring(state) -> None:
    service = Service()
    job = defer_once(bindings(state, service))
    service.wait(job)  # the task failed (a dead triggerer, a timeout) while the job finished
    assert resume_or_defer(**bindings(state, service)) == "output of job-0"
    assert list(service.jobs) == ["job-0"]


def test_a_crash_during_execute_complete_returns_the_result_on_the_next_try(state) -> None:
    service = Service()
    bound = bindings(state, service)
    job = defer_once(bound)
    service.wait(job)

    def die(job_id: Any) -> Any:
        raise Crash

    with pytest.raises(Crash):
        complete_deferred(**{**completion(bound, {"status": "SUCCEEDED"}), "get_result": die})
    assert resume_or_defer(**bound) == "output of job-0"  # already_succeeded
    assert list(service.jobs) == ["job-0"]


def test_a_failed_job_fails_the_try_and_the_next_one_submits_under_a_new_token(state) -> None:
    service = Service()
    bound = bindings(state, service)
    job = defer_once(bound)
    service.jobs[job] = "FAILED"
    with pytest.raises(JobFailedError, match="ended FAILED"):
        complete_deferred(**completion(bound, {"external_id": job, "status": "FAILED"}))
    assert defer_once(bound) == "job-1"
    assert len(set(service.tokens)) == 2


def test_the_stored_id_wins_over_an_event_naming_another_job(state, caplog) -> None:
    service = Service()
    bound = bindings(state, service)
    job = defer_once(bound)
    service.wait(job)
    stale = {"external_id": "job-from-an-old-trigger", "status": "FAILED"}
    assert complete_deferred(**completion(bound, stale)) == "output of job-0"
    assert "completing the stored job" in caplog.text


def test_a_job_still_active_when_the_trigger_fires_is_deferred_on_again(state) -> None:
    service = Service()
    bound = bindings(state, service)
    job = defer_once(bound)
    with pytest.raises(Deferred) as again:
        complete_deferred(**completion(bound, {"external_id": job, "status": "RUNNING"}))
    assert again.value.external_id == job
    assert list(service.jobs) == ["job-0"]


def test_an_event_that_is_not_a_dict_asks_the_job_system(state) -> None:
    service = Service()
    bound = bindings(state, service)
    service.wait(defer_once(bound))
    assert complete_deferred(**completion(bound, "done")) == "output of job-0"


def test_without_a_store_the_id_travels_in_the_event(state) -> None:
    service = Service()
    bound = bindings(None, service)
    job = defer_once(bound)
    service.wait(job)
    assert complete_deferred(**completion(bound, {"external_id": job})) == "output of job-0"
    with pytest.raises(JobFailedError, match="names no job"):
        complete_deferred(**completion(bound, {"status": "SUCCEEDED"}))


def test_the_submit_persist_window_is_closed_as_in_the_blocking_path(state) -> None:
    service = Service()

    def submit_then_die() -> Any:
        service.start(idempotency_token(state, "run_id"))
        raise Crash

    with pytest.raises(Crash):
        resume_or_defer(**bindings(state, service, submit=submit_then_die))
    token = state.get("run_id__intent")["token"]
    found = bindings(state, service, find_job=lambda t: "job-0" if t == token else None)
    assert defer_once(found) == "job-0"  # recovered, deferred on, nothing submitted
    assert len(service.jobs) == 1
    assert state.get("run_id") == "job-0"


def checks(state: TaskStateStore, service: Service) -> dict[str, Any]:
    bound = bindings(state, service)
    return {n: bound[n] for n in ("external_id_key", "get_status", "is_active", "is_succeeded")}


class DeferrableJobOperator(ResumableJobMixin):
    """A provider-style deferrable operator, on a plain class."""

    external_id_key = "batch_job_id"

    def __init__(self, service: Service) -> None:
        super().__init__()
        self.service = service

    def execute(self, context: Any) -> Any:
        return self.execute_deferrable(context)

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        return self.complete_deferred(context, event)

    def defer_job(self, external_id: Any, context: Any) -> Any:
        raise Deferred(external_id)

    def submit_job(self, context: Any) -> Any:
        return self.service.start(self.idempotency_token(context))

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return self.service.jobs.get(external_id, "UNKNOWN")

    def is_job_active(self, status: str) -> bool:
        return status == "RUNNING"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.service.wait(external_id)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return {"job": external_id}


def test_the_mixin_defers_reconnects_and_completes(state, caplog) -> None:
    service = Service()
    op, ctx = DeferrableJobOperator(service), {"task_state_store": state}
    with caplog.at_level(logging.INFO, logger="taskstate.resumable"):
        with pytest.raises(Deferred):
            op.execute(ctx)
        with pytest.raises(Deferred):  # the next try: the job still runs, defer on it again
            op.execute(ctx)
    assert "reconnect (batch_job_id='job-0'" in caplog.text
    service.wait("job-0")
    assert op.execute_complete(ctx, {"external_id": "job-0", "status": "SUCCEEDED"}) == {
        "job": "job-0"
    }
    assert list(service.jobs) == ["job-0"]
    assert state.get("batch_job_id__intent")["external_id"] == "job-0"


def test_durable_false_defers_without_state(state) -> None:
    service = Service()
    op = DeferrableJobOperator(service)
    op.durable = False
    ctx = {"task_state_store": state}
    with pytest.raises(Deferred):
        op.execute(ctx)
    assert state.keys() == []
    service.wait("job-0")
    assert op.execute_complete(ctx, {"external_id": "job-0"}) == {"job": "job-0"}


def test_an_operator_without_defer_job_says_what_to_write(state) -> None:
    class Blocking(DeferrableJobOperator):
        defer_job = ResumableJobMixin.defer_job

    with pytest.raises(NotImplementedError, match=r"self\.defer\(trigger="):
        Blocking(Service()).execute({"task_state_store": state})
    # the id was saved before defer_job was reached: the next try can still defer on it
    assert state.get("batch_job_id") == "job-0"
