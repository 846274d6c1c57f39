"""The mixin's contract in plain Python, on a real SQLite store: the retry table, the intent and
its token, policies, fencing, durable, and what Airflow 3.3.2 gets wrong."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from taskstate import (
    ResumableJobMixin,
    ResumeAction,
    StateStore,
    TaskScope,
    TaskStateStore,
)
from taskstate.errors import LostSubmissionError

SCOPE = TaskScope("dag", "run", "task")
JOB_METHODS = (
    "submit_job",
    "get_job_status",
    "is_job_active",
    "is_job_succeeded",
    "poll_until_complete",
    "get_job_result",
)


class Jobs:
    """An in-memory job system: the mixin, not this, is under test here."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.tokens: dict[str, Any] = {}
        self.submitted: list[str | None] = []
        self.polled: list[Any] = []
        self.next_id: Any = 100

    def set(self, job_id: Any, status: str) -> None:
        self.states[json.dumps(job_id)] = status

    def get(self, job_id: Any) -> str:
        return self.states.get(json.dumps(job_id), "UNKNOWN")


class Op(ResumableJobMixin):
    external_id_key = "job_id"

    def __init__(self, jobs: Jobs, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jobs = jobs

    def submit_job(self, context: Any) -> Any:
        token = self.idempotency_token(context)
        self.jobs.submitted.append(token)
        job_id = self.jobs.next_id
        self.jobs.set(job_id, "RUNNING")
        if token is not None:
            self.jobs.tokens[token] = job_id
        return job_id

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return self.jobs.get(external_id)

    def is_job_active(self, status: str) -> bool:
        return status in ("PENDING", "RUNNING")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.jobs.polled.append(external_id)
        self.jobs.set(external_id, "SUCCEEDED")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return {"result_of": external_id}


class FindingOp(Op):
    def find_job(self, token: str, context: Any) -> Any:
        return self.jobs.tokens.get(token)


@pytest.fixture
def state(store: StateStore) -> TaskStateStore:
    return store.task_state(SCOPE)


@pytest.fixture
def ctx(state: TaskStateStore) -> dict[str, Any]:
    return {"task_state_store": state}


def test_first_try_submits_saves_the_id_and_returns_the_result(ctx, state) -> None:
    jobs = Jobs()
    assert Op(jobs).execute_resumable(ctx) == {"result_of": 100}
    assert state.get("job_id") == 100
    assert state.get("job_id__intent")["external_id"] == 100
    assert jobs.submitted == [state.get("job_id__intent")["token"]]


@pytest.mark.parametrize("stored", [0, "", "j-7", [1], {"a": 1}])
def test_a_running_job_is_reconnected_and_its_result_returned(ctx, state, stored) -> None:
    """Any stored value but None is an id (Airflow 3.3.2 treats 0 and "" as none), and the
    reconnect returns get_job_result (3.3.2 returns poll_until_complete's None)."""
    jobs = Jobs()
    jobs.set(stored, "RUNNING")
    state.set("job_id", stored)
    op = Op(jobs)
    decision = op.resume_decision(ctx)
    assert (decision.action, decision.external_id) == (ResumeAction.RECONNECT, stored)
    assert op.execute_resumable(ctx) == {"result_of": stored}
    assert jobs.submitted == []
    assert jobs.polled == [stored]


def test_a_succeeded_job_returns_its_result_without_polling(ctx, state) -> None:
    jobs = Jobs()
    jobs.set(5, "SUCCEEDED")
    state.set("job_id", 5)
    assert Op(jobs).execute_resumable(ctx) == {"result_of": 5}
    assert jobs.polled == [] and jobs.submitted == []


@pytest.mark.parametrize("status", ["FAILED", "KILLED", "ERROR", "UNKNOWN"])
def test_a_failed_or_unknown_job_is_resubmitted_under_a_new_token(ctx, state, status) -> None:
    jobs = Jobs()
    Op(jobs).execute_resumable(ctx)
    jobs.set(100, status)
    jobs.next_id = 101
    op = Op(jobs)
    assert op.resume_decision(ctx).action is ResumeAction.TERMINAL_RESUBMIT
    assert op.execute_resumable(ctx) == {"result_of": 101}
    assert state.get("job_id") == 101
    first, second = jobs.submitted
    assert first != second
    assert state.get("job_id__intent")["attempt"] == 2


def test_an_id_stored_by_airflows_own_mixin_is_honoured(ctx, state) -> None:
    """Airflow 3.3's mixin stores only the raw id under external_id_key, no intent."""
    jobs = Jobs()
    jobs.set("spark-1", "RUNNING")
    state.set("job_id", "spark-1")
    assert Op(jobs).execute_resumable(ctx) == {"result_of": "spark-1"}


def test_the_token_is_stable_across_retries_of_one_submission(ctx, state) -> None:
    jobs = Jobs()
    op = Op(jobs)
    state.set("job_id__intent", {"token": "ts-earlier", "attempt": 1})
    assert op.idempotency_token(ctx) == "ts-earlier"
    decision = op.resume_decision(ctx)
    assert (decision.action, decision.token) == (ResumeAction.RECOVER_FROM_INTENT, "ts-earlier")
    op.execute_resumable(ctx)
    assert jobs.submitted == ["ts-earlier"]


def test_find_job_recovers_the_id_of_a_job_submitted_before_a_crash(ctx, state) -> None:
    jobs = Jobs()
    jobs.set(42, "RUNNING")
    jobs.tokens["ts-earlier"] = 42
    state.set("job_id__intent", {"token": "ts-earlier", "attempt": 1})
    op = FindingOp(jobs)
    decision = op.resume_decision(ctx)
    assert (decision.action, decision.external_id, decision.recovered) == (
        ResumeAction.RECONNECT,
        42,
        True,
    )
    assert op.execute_resumable(ctx) == {"result_of": 42}
    assert jobs.submitted == []
    assert state.get("job_id") == 42


def test_find_job_finding_nothing_submits_with_the_recorded_token(ctx, state) -> None:
    jobs = Jobs()
    state.set("job_id__intent", {"token": "ts-earlier", "attempt": 1})
    op = FindingOp(jobs)
    decision = op.resume_decision(ctx)
    assert (decision.action, decision.token) == (ResumeAction.FRESH_SUBMIT, "ts-earlier")
    op.execute_resumable(ctx)
    assert jobs.submitted == ["ts-earlier"]


def test_the_fail_policy_raises_and_submits_nothing(ctx, state) -> None:
    class Careful(Op):
        on_lost_submission = "fail"

    jobs = Jobs()
    state.set("job_id__intent", {"token": "ts-earlier", "attempt": 1})
    with pytest.raises(LostSubmissionError, match="ts-earlier") as info:
        Careful(jobs).execute_resumable(ctx)
    assert isinstance(info.value, RuntimeError)
    assert "job_id__intent" in str(info.value)
    assert jobs.submitted == []


def test_a_submit_that_raised_is_retried_with_the_same_token(ctx, state) -> None:
    class Flaky(Op):
        on_lost_submission = "fail"
        calls = 0

        def submit_job(self, context: Any) -> Any:
            Flaky.calls += 1
            if Flaky.calls == 1:
                self.jobs.submitted.append(self.idempotency_token(context))
                raise ConnectionError("job system said 503")
            return super().submit_job(context)

    jobs = Jobs()
    with pytest.raises(ConnectionError):
        Flaky(jobs).execute_resumable(ctx)
    assert "503" in state.get("job_id__intent")["submit_error"]
    decision = Flaky(jobs).resume_decision(ctx)
    assert decision.action is ResumeAction.FRESH_SUBMIT
    assert Flaky(jobs).execute_resumable(ctx) == {"result_of": 100}
    assert jobs.submitted[0] == jobs.submitted[1]
    assert "submit_error" not in state.get("job_id__intent")


def test_verify_job_fences_off_a_reused_id(ctx, state) -> None:
    class Fenced(Op):
        def verify_job(self, external_id: Any, context: Any) -> bool:
            return False

    jobs = Jobs()
    jobs.set("pod-a", "RUNNING")
    state.set("job_id", "pod-a")
    op = Fenced(jobs)
    assert op.resume_decision(ctx).action is ResumeAction.TERMINAL_RESUBMIT
    assert op.execute_resumable(ctx) == {"result_of": 100}
    assert jobs.polled == [100]


def test_resume_decision_writes_nothing(ctx, state) -> None:
    jobs = Jobs()
    state.set("job_id__intent", {"token": "ts-earlier", "attempt": 1})
    before = state.items()
    for op in (Op(jobs), FindingOp(jobs)):
        op.resume_decision(ctx)
    assert state.items() == before
    assert jobs.submitted == []


def test_ids_never_expire_while_the_job_runs_then_age_out(store, ctx, state) -> None:
    class Stops(Op):
        def poll_until_complete(self, external_id: Any, context: Any) -> None:
            entries = [store.backend.get(SCOPE.namespace, k) for k in ("job_id", "job_id__intent")]
            assert [e.expires_at for e in entries if e] == [None, None]
            super().poll_until_complete(external_id, context)

    Stops(Jobs()).execute_resumable(ctx)
    after = [store.backend.get(SCOPE.namespace, k) for k in ("job_id", "job_id__intent")]
    days = store.settings.default_retention_days
    assert [e.expires_at for e in after if e] == [store.clock() + days * 86400.0] * 2


def test_durable_false_keeps_no_state(ctx, state) -> None:
    jobs = Jobs()
    state.set("job_id", 5)
    jobs.set(5, "RUNNING")
    op = Op(jobs, durable=False)
    assert op.resume_decision(ctx).action is ResumeAction.NOT_DURABLE
    assert op.idempotency_token(ctx) is None
    assert op.execute_resumable(ctx) == {"result_of": 100}
    assert state.items() == [("job_id", 5)]


def test_without_a_store_a_warning_and_plain_behaviour(caplog) -> None:
    jobs = Jobs()
    with caplog.at_level(logging.WARNING, logger="taskstate.resumable"):
        assert Op(jobs).execute_resumable({}) == {"result_of": 100}
    assert "crash recovery is disabled" in caplog.text
    assert jobs.submitted == [None]


def test_every_decision_is_logged(ctx, state, caplog) -> None:
    jobs = Jobs()
    with caplog.at_level(logging.INFO, logger="taskstate.resumable"):
        Op(jobs).execute_resumable(ctx)
        Op(jobs).execute_resumable(ctx)
    assert "fresh_submit" in caplog.text
    assert "already_succeeded (job_id=100" in caplog.text


def test_durable_is_a_constructor_argument_and_must_be_a_bool() -> None:
    assert Op(Jobs()).durable is True
    assert Op(Jobs(), durable=False).durable is False
    with pytest.raises(TypeError, match="durable must be True or False"):
        Op(Jobs(), durable="no")


def test_durable_reaches_a_subclass_without_its_own_init() -> None:
    bare = type("Bare", (ResumableJobMixin,), {name: getattr(Op, name) for name in JOB_METHODS})
    child = type("Child", (bare,), {})

    assert bare(durable=False).durable is False
    assert child(durable=False).durable is False
    assert child().durable is True


@pytest.mark.parametrize("missing", JOB_METHODS)
def test_an_incomplete_operator_fails_at_construction(missing: str) -> None:
    methods = {name: getattr(Op, name) for name in JOB_METHODS if name != missing}
    incomplete = type("Incomplete", (ResumableJobMixin,), methods)
    with pytest.raises(TypeError, match=missing):
        incomplete()


class AirflowLikeStore:
    """The surface of Airflow 3.3's own `task_state_store`: get/set/delete/clear, no atomic
    compare-and-set (the mixin falls back to plain writes there)."""

    def __init__(self, inner: TaskStateStore) -> None:
        self._inner = inner

    def get(self, key: str, default: Any = None) -> Any:
        return self._inner.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self._inner.set(key, value, retention=retention)


def test_works_on_a_store_without_compare_and_set(state) -> None:
    jobs = Jobs()
    ctx = {"task_state_store": AirflowLikeStore(state)}
    assert Op(jobs).execute_resumable(ctx) == {"result_of": 100}
    assert state.get("job_id") == 100
    assert Op(jobs).resume_decision(ctx).action is ResumeAction.ALREADY_SUCCEEDED
    jobs.set(100, "FAILED")
    jobs.next_id = 101
    assert Op(jobs).execute_resumable(ctx) == {"result_of": 101}
    assert state.get("job_id__intent")["attempt"] == 2


def test_a_job_without_an_id_is_submitted_again_under_a_new_token(ctx, state) -> None:
    """`submit_job` returning None: nothing to reconnect to, so a retry submits anew (as
    Airflow does), even under on_lost_submission="fail"."""

    class NoId(Op):
        on_lost_submission = "fail"

        def submit_job(self, context: Any) -> Any:
            super().submit_job(context)
            return None

        def poll_until_complete(self, external_id: Any, context: Any) -> None:
            raise RuntimeError("the job failed")

    jobs = Jobs()
    with pytest.raises(RuntimeError, match="the job failed"):
        NoId(jobs).execute_resumable(ctx)
    assert state.get("job_id") is None
    decision = NoId(jobs).resume_decision(ctx)
    assert (decision.action, decision.token) == (ResumeAction.FRESH_SUBMIT, None)
    with pytest.raises(RuntimeError, match="the job failed"):
        NoId(jobs).execute_resumable(ctx)
    first, second = jobs.submitted
    assert first != second


def test_find_job_can_recover_a_job_whose_submit_returned_no_id(ctx, state) -> None:
    class NoIdFinding(FindingOp):
        def submit_job(self, context: Any) -> Any:
            super().submit_job(context)
            return None

    jobs = Jobs()
    NoIdFinding(jobs).execute_resumable(ctx)
    jobs.set(100, "RUNNING")
    decision = NoIdFinding(jobs).resume_decision(ctx)
    assert (decision.action, decision.external_id, decision.recovered) == (
        ResumeAction.RECONNECT,
        100,
        True,
    )


def test_a_plain_class_keeps_its_own_partial() -> None:
    """Only Airflow's `.partial()` is wrapped; a plain class's method of that name is its own."""

    class Base:
        def partial(self, share: float) -> float:
            return share / 2

    job_class = type("Job", (Base, ResumableJobMixin), {n: getattr(Op, n) for n in JOB_METHODS})
    assert job_class().partial(3.0) == 1.5


class ProviderStyleOp(ResumableJobMixin):
    """Written as apache-airflow-providers-amazon 9.39.0 writes `RedshiftDataOperator` and
    `GlueJobOperator` for Airflow 3.3's mixin: the mixin first, an own `__init__` taking
    `durable: bool | None = None` and forwarding it only when set, keyword calls into the
    mixin (`execute_resumable(context=...)`), Airflow's parameter names on the job methods."""

    external_id_key = "redshift_statement_id"

    def __init__(self, jobs: Jobs, durable: bool | None = None, **kwargs: Any) -> None:
        if durable is not None:
            kwargs["durable"] = durable
        super().__init__(**kwargs)
        self.jobs = jobs

    def execute(self, context: Any) -> Any:
        self.execute_resumable(context=context)
        return self.results

    def submit_job(self, context: Any) -> Any:
        return Op.submit_job(self, context=context)  # type: ignore[arg-type]

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return self.jobs.get(external_id)

    def is_job_active(self, status: str) -> bool:
        return Op.is_job_active(self, status=status)  # type: ignore[arg-type]

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        Op.poll_until_complete(self, external_id=external_id, context=context)  # type: ignore[arg-type]
        self.results = [external_id]

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return self.get_job_status(external_id=external_id, context=context)


@pytest.mark.parametrize(("durable", "expected"), [(None, True), (True, True), (False, False)])
def test_a_provider_style_operator_takes_every_durable_spelling(durable, expected) -> None:
    assert ProviderStyleOp(Jobs(), durable=durable).durable is expected
    assert ProviderStyleOp(Jobs()).durable is True


def test_a_provider_style_operator_resumes(ctx, state) -> None:
    jobs = Jobs()
    op = ProviderStyleOp(jobs)
    assert op.execute(context=ctx) == [100]
    assert state.get("redshift_statement_id") == 100
    jobs.set(100, "RUNNING")  # as if the first try had died while polling
    again = ProviderStyleOp(jobs)
    assert again.resume_decision(context=ctx).action is ResumeAction.RECONNECT
    assert again.execute(context=ctx) == [100]
    assert jobs.submitted == [again.idempotency_token(context=ctx)]
