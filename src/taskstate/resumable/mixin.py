"""`ResumableJobMixin`: binds an operator's job methods to the resumable core.

The logic lives in `core.resume_or_submit` and `decision.decide`; `durable=` in `durable`. The
mixin calls the operator's methods positionally, with Airflow 3.3's parameter names, so an
operator written for Airflow 3.3's mixin (the upstream providers' included) works unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from taskstate.resumable import durable as _durable
from taskstate.resumable import reporting
from taskstate.resumable.core import (
    LostSubmissionPolicy,
    complete_deferred,
    idempotency_token,
    resume_or_defer,
    resume_or_submit,
)
from taskstate.resumable.decision import MISSING, ResumeDecision, decide, intent_key
from taskstate.values import JsonValue


class ResumableJobMixin(ABC):
    """Submit one job to an external system, poll it, return its result — crash-safe.

    Put it on any operator (either base-class order) or any plain class; call
    `execute_resumable(context)` from `execute()`. The context needs a `task_state_store`.
    Implement the six abstract methods; optionally `find_job` and `verify_job`.
    """

    external_id_key: ClassVar[str] = "remote_job_id"
    """Store key of the job id. Never rename it while task instances are in flight."""

    on_lost_submission: ClassVar[LostSubmissionPolicy] = "resubmit"
    """When a try died inside the submit→persist window and `find_job` cannot tell whether the
    job exists: "resubmit" with the same idempotency token (a job system that dedupes on it
    submits nothing new), or "fail" the task for a person to check."""

    durable: bool = True
    """False: plain submit/poll/result, no state. Settable per task, in `default_args` and in
    `.partial()`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _durable.install(cls)

    def __init__(self, *args: Any, durable: Any = MISSING, **kwargs: Any) -> None:
        # Reached with `durable` only when a subclass forwards it explicitly (Airflow 3.3's
        # style: `super().__init__(durable=durable, **kwargs)`).
        # Set after the next __init__: before it, Airflow's BaseOperator (next when the mixin
        # comes first) has no state for its __setattr__ and fails on any attribute.
        checked = MISSING if durable is MISSING else _durable.check(durable)
        super().__init__(*args, **kwargs)
        if checked is not MISSING:
            self.durable = checked

    # -- what an operator implements ------------------------------------------------------

    @abstractmethod
    def submit_job(self, context: Any) -> JsonValue:
        """Submit the job and return its id. Pass `self.idempotency_token(context)` to job
        systems that accept a client token, so a resubmission after a crash is deduplicated."""

    @abstractmethod
    def get_job_status(self, external_id: JsonValue, context: Any) -> str:
        """The job's raw status string."""

    @abstractmethod
    def is_job_active(self, status: str) -> bool:
        """True while the job runs or waits (reconnect to it)."""

    @abstractmethod
    def is_job_succeeded(self, status: str) -> bool:
        """True when the job finished successfully."""

    @abstractmethod
    def poll_until_complete(self, external_id: JsonValue, context: Any) -> None:
        """Block until the job is terminal; raise if it failed."""

    @abstractmethod
    def get_job_result(self, external_id: JsonValue, context: Any) -> Any:
        """The job's result after success (what the task returns)."""

    def find_job(self, token: str, context: Any) -> JsonValue | None:
        """Optional: the id of the job submitted with `token`, or None if there is none.

        Called when an earlier try died between recording its intent and saving the job id.
        Implement it for job systems that can search by client token, tag or label.
        """
        raise NotImplementedError

    def verify_job(self, external_id: JsonValue, context: Any) -> bool:
        """Optional fencing: False when the stored id now names a different job (a reused pod
        or run name), so the mixin must not reconnect to it."""
        return True

    def defer_job(self, external_id: JsonValue, context: Any) -> Any:
        """Deferrable operators: hand the wait for `external_id` to a trigger, e.g.
        `self.defer(trigger=MyJobTrigger(external_id), method_name="execute_complete")`.

        The trigger yields `TriggerEvent({"external_id": id, "status": raw_status})` once the
        job is terminal; `execute_complete` returns `self.complete_deferred(context, event)`.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.execute_deferrable needs defer_job(external_id, context): "
            "call self.defer(trigger=<a trigger polling external_id>, "
            'method_name="execute_complete") there'
        )

    # -- the public surface -------------------------------------------------------------

    @property
    def intent_key(self) -> str:
        """The state key that records an intent to submit before the job id is known
        (`<external_id_key>__intent`)."""
        return intent_key(self.external_id_key)

    def idempotency_token(self, context: Mapping[str, Any]) -> str | None:
        """The client token of the current submission, stable across every retry of it.

        A job that failed gets a new token on resubmission (a system deduping on the old one
        would hand back the failed job). None with `durable=False` or without a store.
        """
        store = context.get("task_state_store") if self.durable else None
        return idempotency_token(store, self.external_id_key)

    def resume_decision(self, context: Mapping[str, Any]) -> ResumeDecision:
        """What `execute_resumable` would do now. Reads state and asks the job system; writes
        nothing, so a deferrable operator can act on it without blocking."""
        return decide(context.get("task_state_store"), **self._resumable_checks(context))

    def execute_resumable(self, context: Mapping[str, Any]) -> Any:
        """Submit, reconnect or return the earlier result, per `resume_decision`."""
        return resume_or_submit(
            poll=lambda external_id: self.poll_until_complete(external_id, context),
            **self._resumable_bindings(context),
        )

    def execute_deferrable(self, context: Mapping[str, Any]) -> Any:
        """`execute_resumable` for the deferrable path: submit (or find the earlier job), save
        its id, then `defer_job` on it instead of polling. A job an earlier try left active is
        deferred on again; one that succeeded returns its result without deferring."""
        return resume_or_defer(
            defer=lambda external_id: self.defer_job(external_id, context),
            **self._resumable_bindings(context),
        )

    def complete_deferred(self, context: Mapping[str, Any], event: Any = None) -> Any:
        """What `execute_complete(context, event)` returns: the result of the job this task
        instance's state names (a job still active is deferred on again; a failed one raises
        `JobFailedError`, so the next try submits a new job)."""
        checks = self._resumable_checks(context)
        return complete_deferred(
            task_state_store=context.get("task_state_store"),
            event=event,
            get_status=checks["get_status"],
            is_active=self.is_job_active,
            is_succeeded=self.is_job_succeeded,
            get_result=lambda external_id: self.get_job_result(external_id, context),
            defer=lambda external_id: self.defer_job(external_id, context),
            durable=self.durable,
            external_id_key=self.external_id_key,
            log=reporting.logger_for(self),
        )

    def _resumable_bindings(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """Everything `resume_or_submit` / `resume_or_defer` share, bound to `context`."""
        operator = type(self).__name__
        ti = context.get("ti")
        return {
            "task_state_store": context.get("task_state_store"),
            "submit": lambda: self.submit_job(context),
            "get_result": lambda external_id: self.get_job_result(external_id, context),
            "on_lost_submission": self.on_lost_submission,
            "scope": "\x1f".join(
                str(getattr(ti, name, "")) for name in ("dag_id", "run_id", "task_id", "map_index")
            ),
            "log": reporting.logger_for(self),
            "operator_name": operator,
            "stats_tags": reporting.stats_tags(operator, ti),
            "decision": lambda: self.resume_decision(context),
            **self._resumable_checks(context),
        }

    def _resumable_checks(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """What deciding needs: this operator's answers about its jobs, bound to `context`."""
        return {
            "durable": self.durable,
            "external_id_key": self.external_id_key,
            "get_status": lambda external_id: self.get_job_status(external_id, context),
            "is_active": self.is_job_active,
            "is_succeeded": self.is_job_succeeded,
            "find_job": lambda token: self.find_job(token, context),
            "verify": lambda external_id: self.verify_job(external_id, context),
        }
