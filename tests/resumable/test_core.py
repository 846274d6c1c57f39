"""The resumable core without the mixin: `resume_or_submit` over a real SQLite store and plain
callbacks (a runner's or a deferrable operator's use), and `decide` as a read-only step."""

from __future__ import annotations

from typing import Any

import pytest

from taskstate import ResumeAction, StateStore, TaskScope, TaskStateStore
from taskstate.errors import LostSubmissionError
from taskstate.resumable import decide, idempotency_token, resume_or_submit


class Service:
    """A job service that records every submission with the token it carried."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.tokens: list[str | None] = []

    def start(self, token: str | None) -> str:
        job_id = f"job-{len(self.jobs)}"
        self.jobs[job_id] = "RUNNING"
        self.tokens.append(token)
        return job_id

    def wait(self, job_id: Any) -> None:
        self.jobs[job_id] = "SUCCEEDED"


def bindings(state: TaskStateStore | None, service: Service, **extra: Any) -> dict[str, Any]:
    return {
        "task_state_store": state,
        "external_id_key": "run_id",
        "submit": lambda: service.start(idempotency_token(state, "run_id")),
        "get_status": lambda job_id: service.jobs.get(job_id, "UNKNOWN"),
        "is_active": lambda status: status == "RUNNING",
        "is_succeeded": lambda status: status == "SUCCEEDED",
        "poll": service.wait,
        "get_result": lambda job_id: f"output of {job_id}",
        **extra,
    }


@pytest.fixture
def state(store: StateStore) -> TaskStateStore:
    return store.task_state(TaskScope("dag", "run", "runner"))


def test_submits_once_then_returns_the_result_without_resubmitting(state) -> None:
    service = Service()
    assert resume_or_submit(**bindings(state, service)) == "output of job-0"
    assert resume_or_submit(**bindings(state, service)) == "output of job-0"
    assert list(service.jobs) == ["job-0"]
    assert state.get("run_id") == "job-0"
    assert service.tokens == [state.get("run_id__intent")["token"]]


def test_a_crash_while_polling_reconnects(state) -> None:
    service = Service()

    def crash(job_id: Any) -> None:
        raise KeyboardInterrupt  # the worker dies while the job runs

    with pytest.raises(KeyboardInterrupt):
        resume_or_submit(**{**bindings(state, service), "poll": crash})
    assert service.jobs == {"job-0": "RUNNING"}
    assert resume_or_submit(**bindings(state, service)) == "output of job-0"
    assert list(service.jobs) == ["job-0"]


def test_a_crash_between_submit_and_persist_is_found_by_find_job(state) -> None:
    """The window Airflow 3.3.2 leaves open: the intent (and its token) is already saved."""
    service = Service()

    def submit_then_die() -> Any:
        service.start(idempotency_token(state, "run_id"))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resume_or_submit(**{**bindings(state, service), "submit": submit_then_die})
    by_token = {token: job for job, token in zip(service.jobs, service.tokens, strict=True)}
    result = resume_or_submit(**bindings(state, service, find_job=by_token.get))
    assert result == "output of job-0"
    assert list(service.jobs) == ["job-0"]


def test_without_find_job_the_fail_policy_raises(state) -> None:
    service = Service()

    def submit_then_die() -> Any:
        service.start(None)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resume_or_submit(**{**bindings(state, service), "submit": submit_then_die})
    with pytest.raises(LostSubmissionError, match="run_id__intent"):
        resume_or_submit(**bindings(state, service, on_lost_submission="fail"))
    assert len(service.jobs) == 1


def test_decide_is_read_only_and_lets_a_caller_defer(state) -> None:
    """A deferrable operator's use: decide, and defer on the job found instead of polling."""
    service = Service()
    resume_or_submit(**{**bindings(state, service), "poll": lambda job_id: None})
    before = dict(state.items())
    checks = {
        k: v
        for k, v in bindings(state, service).items()
        if k in ("external_id_key", "get_status", "is_active", "is_succeeded")
    }
    decision = decide(state, **checks)
    assert (decision.action, decision.external_id) == (ResumeAction.RECONNECT, "job-0")
    assert dict(state.items()) == before


@pytest.mark.parametrize(("durable", "has_store"), [(False, True), (True, False)])
def test_without_durability_or_a_store_it_submits_every_time(state, durable, has_store) -> None:
    service = Service()
    for _ in range(2):
        resume_or_submit(**bindings(state if has_store else None, service, durable=durable))
    assert list(service.jobs) == ["job-0", "job-1"]
    assert state.get("run_id") is None
