"""The resumable core: `resume_or_submit(...)`, one external job per task instance, crash-safe.

A free function over a store-like object and callbacks, in the shape of Airflow 3.3's
`resume_or_submit` (the mixin only binds an operator's methods to it), so a deferrable operator,
a task runner or a plain script can use it without the mixin. It decides (`decision.decide`),
reports (`reporting`), then acts, writing the intent before the submission and the id after it:
that is what closes the submit→persist window Airflow 3.3.2 leaves open.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Literal

from taskstate.errors import ConcurrentTryError, JobFailedError, LostSubmissionError
from taskstate.resumable import reporting
from taskstate.resumable.decision import (
    MISSING,
    ResumeAction,
    ResumeDecision,
    StoreLike,
    decide,
    intent_key,
    read_intent,
)
from taskstate.values import NEVER_EXPIRE, JsonValue

LostSubmissionPolicy = Literal["resubmit", "fail"]


def resume_or_submit(
    *,
    task_state_store: StoreLike | None,
    submit: Callable[[], JsonValue],
    get_status: Callable[[JsonValue], str],
    is_active: Callable[[str], bool],
    is_succeeded: Callable[[str], bool],
    poll: Callable[[JsonValue], object],
    get_result: Callable[[JsonValue], Any],
    durable: bool = True,
    external_id_key: str = "remote_job_id",
    find_job: Callable[[str], JsonValue | None] | None = None,
    verify: Callable[[JsonValue], bool] | None = None,
    on_lost_submission: LostSubmissionPolicy = "resubmit",
    scope: str = "",
    log: Any = None,
    operator_name: str = "resumable_job",
    stats_tags: Mapping[str, str] | None = None,
    decision: Callable[[], ResumeDecision] | None = None,
) -> Any:
    """Submit a job and wait for it, or reconnect to the one an earlier try submitted.

    The callbacks bind the job system: `submit()` starts the job and returns its id (read the
    token to pass along with `idempotency_token(task_state_store, external_id_key)`),
    `get_status(id)` reads its raw status, `is_active` / `is_succeeded` classify that, `poll(id)`
    blocks until it is terminal (raising on failure), `get_result(id)` is what this returns.
    `find_job(token)` and `verify(id)` are optional (see `decision.decide`). `scope` names the
    task instance in the token when the store does not know its own scope. `log`,
    `operator_name` and `stats_tags` label the report; without `log`, the `taskstate.resumable`
    logger. `decision` replaces `decide(...)` over these callbacks: the mixin passes its
    `resume_decision`, so a subclass that overrides that method is obeyed.
    """
    taken, record = _decide_and_report(
        task_state_store,
        durable=durable,
        external_id_key=external_id_key,
        get_status=get_status,
        is_active=is_active,
        is_succeeded=is_succeeded,
        find_job=find_job,
        verify=verify,
        log=log,
        operator_name=operator_name,
        stats_tags=stats_tags,
        decision=decision,
    )

    def wait(external_id: JsonValue) -> Any:
        poll(external_id)
        return get_result(external_id) if record is None else record.finish(external_id, get_result)

    return _act(taken, record, submit, wait, get_result, on_lost_submission, scope, operator_name)


def resume_or_defer(
    *,
    task_state_store: StoreLike | None,
    submit: Callable[[], JsonValue],
    get_status: Callable[[JsonValue], str],
    is_active: Callable[[str], bool],
    is_succeeded: Callable[[str], bool],
    defer: Callable[[JsonValue], Any],
    get_result: Callable[[JsonValue], Any],
    durable: bool = True,
    external_id_key: str = "remote_job_id",
    find_job: Callable[[str], JsonValue | None] | None = None,
    verify: Callable[[JsonValue], bool] | None = None,
    on_lost_submission: LostSubmissionPolicy = "resubmit",
    scope: str = "",
    log: Any = None,
    operator_name: str = "resumable_job",
    stats_tags: Mapping[str, str] | None = None,
    decision: Callable[[], ResumeDecision] | None = None,
) -> Any:
    """`resume_or_submit` for a deferrable operator: hand the wait to a trigger, not a poll.

    Same decision, intent, token and report; then `defer(id)` (which calls the operator's
    `self.defer(...)` and so raises Airflow's `TaskDeferred`) where `resume_or_submit` would
    poll: after submitting and saving the id, and on `RECONNECT` (the job an earlier try
    submitted is still active: defer on it again, submit nothing). `ALREADY_SUCCEEDED` returns
    `get_result(id)` without deferring. The id is saved before `defer` is called, so a worker
    that dies in between leaves a job the next try defers on again. When the trigger fires,
    `complete_deferred(...)` (the operator's `execute_complete`) reads the id from the state.
    """
    taken, record = _decide_and_report(
        task_state_store,
        durable=durable,
        external_id_key=external_id_key,
        get_status=get_status,
        is_active=is_active,
        is_succeeded=is_succeeded,
        find_job=find_job,
        verify=verify,
        log=log,
        operator_name=operator_name,
        stats_tags=stats_tags,
        decision=decision,
    )
    return _act(taken, record, submit, defer, get_result, on_lost_submission, scope, operator_name)


def complete_deferred(
    *,
    task_state_store: StoreLike | None,
    event: Any,
    get_status: Callable[[JsonValue], str],
    is_active: Callable[[str], bool],
    is_succeeded: Callable[[str], bool],
    get_result: Callable[[JsonValue], Any],
    defer: Callable[[JsonValue], Any] | None = None,
    durable: bool = True,
    external_id_key: str = "remote_job_id",
    log: Any = None,
) -> Any:
    """The end of a deferral (the operator's `execute_complete`): the job's result, or raise.

    The job is the one in the task's state (the event's `external_id` is used only without a
    store or with `durable=False`): a trigger re-created from old kwargs cannot make this try
    return another job's result. The status is the event's `status` when the event names that
    job, else asked with `get_status`. Succeeded: the id and intent age out with the default
    retention and `get_result(id)` is returned. Still active (a trigger that gave up, timed
    out): `defer(id)` again when given. Anything else raises `JobFailedError`, and the next try
    submits a new job (`terminal_resubmit`).
    """
    log = log or reporting.LOG
    sent = event if isinstance(event, Mapping) else {}
    record = None
    external_id: Any = sent.get("external_id")
    if durable and task_state_store is not None:
        record = _Record(task_state_store, external_id_key, log)
        stored = record.stored_id()
        if stored is not MISSING:
            if "external_id" in sent and sent["external_id"] != stored:
                log.warning(
                    "the trigger's event names job %r but this task instance's state holds "
                    "%r: completing the stored job",
                    sent["external_id"],
                    stored,
                )
                sent = {}
            external_id = stored
    if external_id is None:
        raise JobFailedError(
            f"the trigger's event {event!r} names no job and the task state holds none under "
            f"{external_id_key!r}: nothing to complete. Yield "
            '{"external_id": ..., "status": ...} from the trigger'
        )
    status = sent.get("status") if isinstance(sent.get("status"), str) else None
    if status is None:
        status = get_status(external_id)
    if is_succeeded(status):
        return get_result(external_id) if record is None else record.finish(external_id, get_result)
    if is_active(status) and defer is not None:
        log.info("job %r is still %s after the trigger fired: deferring again", external_id, status)
        return defer(external_id)
    raise JobFailedError(
        f"job {external_id!r} ended {status}; the next try of this task submits a new job"
    )


def _decide_and_report(
    task_state_store: StoreLike | None,
    *,
    log: Any,
    operator_name: str,
    stats_tags: Mapping[str, str] | None,
    decision: Callable[[], ResumeDecision] | None,
    **checks: Any,
) -> tuple[ResumeDecision, _Record | None]:
    """Decide (or obey the operator's `resume_decision`) and report it; the writer to act
    with, None when there is no state to keep."""
    with reporting.decision_span(operator_name) as span:
        taken = decide(task_state_store, **checks) if decision is None else decision()
        reporting.report(
            taken,
            external_id_key=checks["external_id_key"],
            log=log or reporting.LOG,
            tags=stats_tags or reporting.stats_tags(operator_name, None),
            span=span,
        )
    if not checks["durable"] or task_state_store is None:
        return taken, None
    return taken, _Record(task_state_store, checks["external_id_key"], log or reporting.LOG)


def _act(
    taken: ResumeDecision,
    record: _Record | None,
    submit: Callable[[], JsonValue],
    wait: Callable[[JsonValue], Any],
    get_result: Callable[[JsonValue], Any],
    on_lost_submission: LostSubmissionPolicy,
    scope: str,
    operator_name: str,
) -> Any:
    """Carry the decision out; `wait(id)` is polling (then the result) or deferring."""
    if record is None:
        return wait(submit())
    action = taken.action
    if action in (ResumeAction.RECONNECT, ResumeAction.ALREADY_SUCCEEDED):
        earlier: Any = taken.external_id
        if taken.recovered:
            record.save_id(earlier)
        if action is ResumeAction.RECONNECT:
            return wait(earlier)
        return record.finish(earlier, get_result)
    if action is ResumeAction.RECOVER_FROM_INTENT and on_lost_submission == "fail":
        raise LostSubmissionError(
            f"an earlier try of {operator_name} died after recording its intent to submit "
            f"(idempotency token {taken.token}) and before saving the job id, so the job may "
            "or may not exist. Look for a job carrying that token in the job system. To submit "
            f"again, delete the task state key {record.intent_key!r} and retry the task; to make "
            "this automatic, implement find_job(token, context) or set "
            'on_lost_submission = "resubmit"'
        )
    token = taken.token or record.new_intent(scope)
    return _submit(record, token, submit, wait)


def _submit(
    record: _Record, token: str, submit: Callable[[], JsonValue], wait: Callable[[JsonValue], Any]
) -> Any:
    """Submit under the recorded intent, save the id, then wait (poll, or defer) on it."""
    try:
        external_id = submit()
    except Exception as exc:
        # submit said no: the next try may submit again with the same token, even under
        # on_lost_submission="fail" (which is for tries that died without a word).
        error = f"{type(exc).__name__}: {exc}"[:500]
        with contextlib.suppress(Exception):
            record.mark(token, {"submit_error": error})
        raise
    if external_id is None:
        record.log.warning(
            "submit_job returned no id, so a retry cannot reconnect to this job "
            "(it keeps the idempotency token %s for find_job)",
            token,
        )
        record.mark(token, {"no_id": True})
    else:
        record.save_id(external_id, token)
    return wait(external_id)


def idempotency_token(task_state_store: StoreLike | None, external_id_key: str) -> str | None:
    """The client token of the current submission, stable across every retry of it.

    A job that failed gets a new token on resubmission (a system deduping on the old one
    would hand back the failed job). None without a store or before the first submission.
    """
    if task_state_store is None:
        return None
    intent = read_intent(task_state_store.get(intent_key(external_id_key)))
    return None if intent is None else str(intent["token"])


class _Record:
    """The writes: the intent before submitting, the id after, and their retention."""

    def __init__(self, store: StoreLike, external_id_key: str, log: Any) -> None:
        self.store = store
        self.external_id_key = external_id_key
        self.intent_key = intent_key(external_id_key)
        self.log = log

    def new_intent(self, scope: str) -> str:
        """Record a fresh intent (new token) before submitting; returns the token in force.

        Compare-and-set makes it atomic: if another try got there first, its token wins and
        both submissions carry it.
        """
        previous = self.store.get(self.intent_key)
        nonce = secrets.token_hex(16)
        attempt = (read_intent(previous) or {}).get("attempt", 0) + 1
        named = getattr(self.store, "scope", None)
        if named is not None:
            scope = str(getattr(named, "namespace", named))
        digest = hashlib.sha256(f"{scope}\x1f{self.external_id_key}\x1f{nonce}".encode())
        token = "ts-" + digest.hexdigest()[:40]
        intent = {"token": token, "attempt": attempt}
        cas = getattr(self.store, "compare_and_set", None)
        if cas is None:  # Airflow 3.3's own store: one try runs at a time, a plain write
            self.store.set(self.intent_key, intent, retention=NEVER_EXPIRE)
            return token
        if cas(self.intent_key, previous, intent, retention=NEVER_EXPIRE):
            return token
        winner = read_intent(self.store.get(self.intent_key))
        if winner is None or "external_id" in winner:
            raise ConcurrentTryError(
                f"another try of this task changed {self.intent_key!r} while this one was about "
                "to submit: two tries run at once. Retry the task; it reconnects to that job"
            )
        return str(winner["token"])

    def save_id(self, external_id: JsonValue, token: str | None = None) -> None:
        """Complete the intent with the id, then mirror it under `external_id_key`."""
        intent = read_intent(self.store.get(self.intent_key)) or {"token": token, "attempt": 1}
        if token is None:
            token = str(intent["token"])
        self.mark(token, {"external_id": external_id}, base=intent)
        self.store.set(self.external_id_key, external_id, retention=NEVER_EXPIRE)
        self.log.debug("Persisted external id %s=%r", self.external_id_key, external_id)

    def mark(self, token: str, fields: dict[str, Any], base: dict[str, Any] | None = None) -> None:
        intent = base if base is not None else read_intent(self.store.get(self.intent_key))
        updated = {**(intent or {}), "token": token, **fields}
        if "external_id" in fields:  # an earlier failed submission no longer matters
            updated.pop("submit_error", None)
        self.store.set(self.intent_key, updated, retention=NEVER_EXPIRE)

    def stored_id(self) -> Any:
        """The saved job id (under `external_id_key`, else in the intent), or MISSING."""
        stored = self.store.get(self.external_id_key, MISSING)
        if stored is MISSING:
            intent = read_intent(self.store.get(self.intent_key))
            if intent is not None and "external_id" in intent:
                stored = intent["external_id"]
        return stored

    def finish(self, external_id: JsonValue, get_result: Callable[[JsonValue], Any]) -> Any:
        result = get_result(external_id)
        # The job is done: let its id age out with the default retention like other task
        # state, instead of keeping two rows per task instance forever.
        for key in (self.intent_key, self.external_id_key):
            value = self.store.get(key, MISSING)
            if value is not MISSING:
                self.store.set(key, value, retention=None)
        return result
