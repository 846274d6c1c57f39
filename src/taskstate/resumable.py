"""`ResumableJobMixin`: submit one external job per task instance, even across worker crashes.

State kept in the task's `task_state_store` (both keys never expire while a job may run):

- `<external_id_key>`: the job id, exactly as Airflow 3.3's mixin stores it (so the UI, other
  tools and Airflow's own mixin read the same value);
- `<external_id_key>__intent`: `{"token": ..., "attempt": n, "external_id": ...}`, written
  *before* `submit_job` and completed with the id after it. An intent without an id means a
  try died inside the submit→persist window; its token is what lets the next try find or
  dedupe the job instead of paying for a second one.

`import taskstate` must not import Airflow: Airflow's stats and OpenTelemetry are looked up
only when a decision is reported, and only if they are already there.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import inspect
import logging
import secrets
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from taskstate.errors import ConcurrentTryError, LostSubmissionError
from taskstate.values import NEVER_EXPIRE, JsonValue

_LOG = logging.getLogger(__name__)
INTENT_SUFFIX = "__intent"
_MISSING: Any = object()


class ResumeAction(str, enum.Enum):
    """What `execute_resumable` does on this try (the value is the span/log name)."""

    FRESH_SUBMIT = "fresh_submit"
    """Nothing was submitted before (or the job system confirmed so): submit."""
    RECONNECT = "reconnect"
    """A job from an earlier try is still active: poll it, then return its result."""
    ALREADY_SUCCEEDED = "already_succeeded"
    """A job from an earlier try succeeded: return its result without polling."""
    TERMINAL_RESUBMIT = "terminal_resubmit"
    """The earlier job failed, is unknown, or `verify_job` rejected the id: submit a new one."""
    RECOVER_FROM_INTENT = "recover_from_intent"
    """An earlier try died between recording its intent and saving the job id, and there is no
    `find_job` to ask: follow `on_lost_submission` (resubmit with the same token, or fail)."""
    NOT_DURABLE = "not_durable"
    """`durable=False`: plain submit, poll, result; no state."""
    NO_TASK_STATE_STORE = "no_task_state_store"
    """The context has no `task_state_store`: plain submit, poll, result, with a warning."""


@dataclass(frozen=True)
class ResumeDecision:
    """The outcome of `resume_decision()`; compare `action` against `ResumeAction`.

    `external_id` is the job the decision is about (None when there is none: None is never a
    stored id); `recovered` says it came from `find_job` rather than from the store; `token` is
    the idempotency token the next submission will carry when it reuses the recorded intent.
    """

    action: ResumeAction
    external_id: JsonValue | None = None
    status: str | None = None
    token: str | None = None
    recovered: bool = False
    reason: str = ""


class _Store(Protocol):
    """What the mixin needs from a `task_state_store` (taskstate's or Airflow 3.3's)."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any, *, retention: Any = None) -> None: ...


def _accepts_durable(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap a subclass's `__init__` so `durable=` works whatever the base-class order.

    Airflow's `BaseOperator.__init__` rejects keywords it does not know, so with the mixin
    after it (the skill's `class Op(BaseOperator, ResumableJobMixin)`) `durable` must be taken
    out before it gets there. The wrapper's signature names `durable`, which is what Airflow's
    `apply_defaults` reads to fill it from `default_args` and what `.partial()` validates
    against. `durable` is recorded before the wrapped `__init__` runs, so its body sees it.
    """
    signature = inspect.signature(init)
    passes_through = "durable" in signature.parameters

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, durable: Any = _MISSING, **kwargs: Any) -> None:
        if durable is not _MISSING:
            self.durable = _check_durable(durable)
            if passes_through:
                kwargs["durable"] = durable
        init(self, *args, **kwargs)

    __init__.__signature__ = _with_durable(signature)  # type: ignore[attr-defined]
    __init__._taskstate_accepts_durable = True  # type: ignore[attr-defined]
    return __init__


def _partial_with_durable(cls: Any) -> classmethod[Any, ..., Any]:
    """Airflow's `.partial()` keeps only BaseOperator's own keys from the `default_args` given
    to it, so `.partial(default_args={"durable": False})` would be lost: pass it on by name."""

    def partial(klass: Any, **kwargs: Any) -> Any:
        default_args = kwargs.get("default_args")
        inherited = isinstance(default_args, Mapping) and "durable" in default_args
        if inherited and "durable" not in kwargs:
            kwargs["durable"] = default_args["durable"]  # type: ignore[index]
        return super(cls, klass).partial(**kwargs)

    return classmethod(partial)


def _with_durable(signature: inspect.Signature) -> inspect.Signature:
    params = list(signature.parameters.values())
    if "durable" in signature.parameters:
        return signature
    durable = inspect.Parameter("durable", inspect.Parameter.KEYWORD_ONLY, default=True)
    at = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    return signature.replace(parameters=[*params[:at], durable, *params[at:]])


def _check_durable(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"durable must be True or False, got {type(value).__name__} {value!r}")
    return value


class ResumableJobMixin(ABC):
    """Submit one job to an external system, poll it, return its result — crash-safe.

    Put it on any operator (either base-class order) or any plain class; call
    `execute_resumable(context)` from `execute()`. The context needs a `task_state_store`.
    Implement the six abstract methods; optionally `find_job` and `verify_job`.
    """

    external_id_key: ClassVar[str] = "remote_job_id"
    """Store key of the job id. Never rename it while task instances are in flight."""

    on_lost_submission: ClassVar[Literal["resubmit", "fail"]] = "resubmit"
    """When a try died inside the submit→persist window and `find_job` cannot tell whether the
    job exists: "resubmit" with the same idempotency token (a job system that dedupes on it
    submits nothing new), or "fail" the task for a person to check."""

    durable: bool = True
    """False: plain submit/poll/result, no state. Settable per task, in `default_args` and in
    `.partial()`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A class that defines `__init__`, or inherits one that does not take `durable` yet
        # (Airflow's BaseOperator's), gets the wrapper; Airflow's metaclass then wraps that.
        if not getattr(cls.__init__, "_taskstate_accepts_durable", False):
            cls.__init__ = _accepts_durable(cls.__init__)  # type: ignore[method-assign]
        # Only Airflow's own `.partial()` (a `_PartialDescriptor` on BaseOperator, 2.x and 3.x);
        # a subclass of one already wrapped inherits the wrapper, which serves it too.
        if type(inspect.getattr_static(cls, "partial", None)).__name__ == "_PartialDescriptor":
            cls.partial = _partial_with_durable(cls)  # type: ignore[attr-defined]

    def __init__(self, *args: Any, durable: Any = _MISSING, **kwargs: Any) -> None:
        # Reached with `durable` only when a subclass forwards it explicitly (Airflow 3.3's
        # style: `super().__init__(durable=durable, **kwargs)`).
        if durable is not _MISSING:
            self.durable = _check_durable(durable)
        super().__init__(*args, **kwargs)

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

    # -- the public surface -------------------------------------------------------------

    @property
    def intent_key(self) -> str:
        return self.external_id_key + INTENT_SUFFIX

    def idempotency_token(self, context: Mapping[str, Any]) -> str | None:
        """The client token of the current submission, stable across every retry of it.

        A job that failed gets a new token on resubmission (a system deduping on the old one
        would hand back the failed job). None with `durable=False` or without a store.
        """
        store = self._resumable_store(context)
        if store is None:
            return None
        intent = _intent(store.get(self.intent_key))
        return None if intent is None else str(intent["token"])

    def resume_decision(self, context: Mapping[str, Any]) -> ResumeDecision:
        """What `execute_resumable` would do now. Reads state and asks the job system; writes
        nothing, so a deferrable operator can act on it without blocking."""
        if not self.durable:
            return ResumeDecision(ResumeAction.NOT_DURABLE)
        store = context.get("task_state_store")
        if store is None:
            return ResumeDecision(ResumeAction.NO_TASK_STATE_STORE)
        intent = _intent(store.get(self.intent_key))
        if intent is not None and "external_id" not in intent:
            return self._resumable_decide_lost(intent, context)
        stored = store.get(self.external_id_key, _MISSING)
        if stored is _MISSING and intent is not None:
            stored = intent["external_id"]
        if stored is _MISSING:
            return ResumeDecision(ResumeAction.FRESH_SUBMIT, reason="no job id stored")
        return self._resumable_decide_on_job(stored, context, recovered=False)

    def execute_resumable(self, context: Mapping[str, Any]) -> Any:
        """Submit, reconnect or return the earlier result, per `resume_decision`."""
        with _span(self) as span:
            decision = self.resume_decision(context)
            self._resumable_report(decision, context, span)
        store = self._resumable_store(context)
        action = decision.action
        if store is None:
            external_id = self.submit_job(context)
            self.poll_until_complete(external_id, context)
            return self.get_job_result(external_id, context)
        if action in (ResumeAction.RECONNECT, ResumeAction.ALREADY_SUCCEEDED):
            earlier: Any = decision.external_id
            if decision.recovered:
                self._resumable_save_id(store, earlier)
            if action is ResumeAction.RECONNECT:
                self.poll_until_complete(earlier, context)
            return self._resumable_finish(store, earlier, context)
        if action is ResumeAction.RECOVER_FROM_INTENT and self.on_lost_submission == "fail":
            raise LostSubmissionError(self._resumable_lost_message(decision))
        token = decision.token or self._resumable_new_intent(store, context)
        return self._resumable_submit(store, token, context)

    # -- decisions ----------------------------------------------------------------------

    def _resumable_decide_lost(
        self, intent: dict[str, Any], context: Mapping[str, Any]
    ) -> ResumeDecision:
        token = str(intent["token"])
        if "submit_error" in intent:
            return ResumeDecision(
                ResumeAction.FRESH_SUBMIT,
                token=token,
                reason=f"the earlier submit_job raised {intent['submit_error']}",
            )
        try:
            found = self.find_job(token, context)
        except NotImplementedError:
            if intent.get("no_id"):  # submitted, but there is nothing to reconnect to
                return ResumeDecision(
                    ResumeAction.FRESH_SUBMIT,
                    reason="the earlier submit_job returned no id (a new job, as Airflow does)",
                )
            return ResumeDecision(
                ResumeAction.RECOVER_FROM_INTENT,
                token=token,
                reason="an earlier try died after recording its intent, before saving the id",
            )
        if found is None:
            return ResumeDecision(
                ResumeAction.FRESH_SUBMIT,
                token=token,
                reason="find_job: the job system has no job for the recorded token",
            )
        return self._resumable_decide_on_job(found, context, recovered=True)

    def _resumable_decide_on_job(
        self, external_id: JsonValue, context: Mapping[str, Any], *, recovered: bool
    ) -> ResumeDecision:
        if not self.verify_job(external_id, context):
            return ResumeDecision(
                ResumeAction.TERMINAL_RESUBMIT,
                external_id=external_id,
                recovered=recovered,
                reason="verify_job: the id now names a different job",
            )
        status = self.get_job_status(external_id, context)
        if self.is_job_active(status):
            action, reason = ResumeAction.RECONNECT, "the job is still active: polling it"
        elif self.is_job_succeeded(status):
            action, reason = ResumeAction.ALREADY_SUCCEEDED, "the job succeeded: no polling"
        else:
            action, reason = ResumeAction.TERMINAL_RESUBMIT, "the job did not succeed: a new one"
        return ResumeDecision(
            action, external_id=external_id, status=status, recovered=recovered, reason=reason
        )

    # -- state --------------------------------------------------------------------------

    def _resumable_store(self, context: Mapping[str, Any]) -> _Store | None:
        return context.get("task_state_store") if self.durable else None

    def _resumable_new_intent(self, store: _Store, context: Mapping[str, Any]) -> str:
        """Record a fresh intent (new token) before submitting; returns the token in force.

        Compare-and-set makes it atomic: if another try got there first, its token wins and
        both submissions carry it.
        """
        previous = store.get(self.intent_key)
        nonce = secrets.token_hex(16)
        attempt = (_intent(previous) or {}).get("attempt", 0) + 1
        token = (
            "ts-"
            + hashlib.sha256(
                f"{_scope_text(store, context)}\x1f{self.external_id_key}\x1f{nonce}".encode()
            ).hexdigest()[:40]
        )
        intent = {"token": token, "attempt": attempt}
        cas = getattr(store, "compare_and_set", None)
        if cas is None:  # Airflow 3.3's own store: one try runs at a time, a plain write
            store.set(self.intent_key, intent, retention=NEVER_EXPIRE)
            return token
        if cas(self.intent_key, previous, intent, retention=NEVER_EXPIRE):
            return token
        winner = _intent(store.get(self.intent_key))
        if winner is None or "external_id" in winner:
            raise ConcurrentTryError(
                f"another try of this task changed {self.intent_key!r} while this one was about "
                "to submit: two tries run at once. Retry the task; it reconnects to that job"
            )
        return str(winner["token"])

    def _resumable_submit(self, store: _Store, token: str, context: Mapping[str, Any]) -> Any:
        try:
            external_id = self.submit_job(context)
        except Exception as exc:
            # submit_job said no: the next try may submit again with the same token, even
            # under on_lost_submission="fail" (which is for tries that died without a word).
            error = f"{type(exc).__name__}: {exc}"[:500]
            with contextlib.suppress(Exception):
                self._resumable_mark_intent(store, token, {"submit_error": error})
            raise
        if external_id is None:
            self._resumable_log().warning(
                "submit_job returned no id, so a retry cannot reconnect to this job "
                "(it keeps the idempotency token %s for find_job)",
                token,
            )
            self._resumable_mark_intent(store, token, {"no_id": True})
        else:
            self._resumable_save_id(store, external_id, token)
        self.poll_until_complete(external_id, context)
        return self._resumable_finish(store, external_id, context)

    def _resumable_save_id(
        self, store: _Store, external_id: JsonValue, token: str | None = None
    ) -> None:
        """Complete the intent with the id, then mirror it under `external_id_key`."""
        intent = _intent(store.get(self.intent_key)) or {"token": token, "attempt": 1}
        if token is None:
            token = str(intent["token"])
        self._resumable_mark_intent(store, token, {"external_id": external_id}, base=intent)
        store.set(self.external_id_key, external_id, retention=NEVER_EXPIRE)
        self._resumable_log().debug(
            "Persisted external id %s=%r", self.external_id_key, external_id
        )

    def _resumable_mark_intent(
        self,
        store: _Store,
        token: str,
        fields: dict[str, Any],
        base: dict[str, Any] | None = None,
    ) -> None:
        intent = base if base is not None else _intent(store.get(self.intent_key))
        updated = {**(intent or {}), "token": token, **fields}
        if "external_id" in fields:  # an earlier failed submit_job no longer matters
            updated.pop("submit_error", None)
        store.set(self.intent_key, updated, retention=NEVER_EXPIRE)

    def _resumable_finish(
        self, store: _Store, external_id: JsonValue, context: Mapping[str, Any]
    ) -> Any:
        result = self.get_job_result(external_id, context)
        # The job is done: let its id age out with the default retention like other task
        # state, instead of keeping two rows per task instance forever.
        for key in (self.intent_key, self.external_id_key):
            value = store.get(key, _MISSING)
            if value is not _MISSING:
                store.set(key, value, retention=None)
        return result

    # -- reporting ----------------------------------------------------------------------

    def _resumable_log(self) -> Any:
        log = getattr(self, "log", None)
        return log if callable(getattr(log, "warning", None)) else _LOG

    def _resumable_report(
        self, decision: ResumeDecision, context: Mapping[str, Any], span: Any
    ) -> None:
        action = decision.action
        key = self.external_id_key
        log = self._resumable_log()
        if action is ResumeAction.NOT_DURABLE:
            return
        if action is ResumeAction.NO_TASK_STATE_STORE:
            log.warning(
                "task_state_store not available in context, crash recovery is disabled for this "
                "run: submitting without saving the job id"
            )
            _set_span(span, decision, key)
            return
        counters = _COUNTERS[action]
        if decision.external_id is not None and action is not ResumeAction.FRESH_SUBMIT:
            counters = ("resumable_job.reconnect_attempt", *counters)
        if decision.recovered or decision.token is not None:
            counters = ("resumable_job.recover_from_intent", *counters)
        _emit(counters, _stats_tags(self, context))
        _set_span(span, decision, key)
        level = "warning" if action in _WARNED else "info"
        facts = [f"{key}={decision.external_id!r}"] if decision.external_id is not None else []
        if decision.status is not None:
            facts.append(f"status {decision.status}")
        if decision.recovered:
            facts.append("id recovered by find_job")
        if decision.token is not None:
            facts.append(f"idempotency token {decision.token}")
        getattr(log, level)(
            "Resumable job: %s (%s) — %s", action.value, ", ".join(facts) or key, decision.reason
        )

    def _resumable_lost_message(self, decision: ResumeDecision) -> str:
        return (
            f"an earlier try of {type(self).__name__} died after recording its intent to submit "
            f"(idempotency token {decision.token}) and before saving the job id, so the job may "
            "or may not exist. Look for a job carrying that token in the job system. To submit "
            f"again, delete the task state key {self.intent_key!r} and retry the task; to make "
            "this automatic, implement find_job(token, context) or set "
            'on_lost_submission = "resubmit"'
        )


_COUNTERS: dict[ResumeAction, tuple[str, ...]] = {
    ResumeAction.FRESH_SUBMIT: ("resumable_job.fresh_submit",),
    ResumeAction.RECONNECT: ("resumable_job.reconnect_success",),
    ResumeAction.ALREADY_SUCCEEDED: ("resumable_job.already_succeeded",),
    ResumeAction.TERMINAL_RESUBMIT: ("resumable_job.terminal_resubmit",),
    ResumeAction.RECOVER_FROM_INTENT: (),
}
_WARNED = {ResumeAction.TERMINAL_RESUBMIT, ResumeAction.RECOVER_FROM_INTENT}


def _intent(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and isinstance(value.get("token"), str) else None


def _scope_text(store: Any, context: Mapping[str, Any]) -> str:
    scope = getattr(store, "scope", None)
    if scope is not None:
        return str(getattr(scope, "namespace", scope))
    ti = context.get("ti")
    fields = ("dag_id", "run_id", "task_id", "map_index")
    return "\x1f".join(str(getattr(ti, name, "")) for name in fields)


def _stats_tags(op: object, context: Mapping[str, Any]) -> dict[str, str]:
    tags = {"operator": type(op).__name__}
    team = getattr(context.get("ti"), "stats_tags", None)
    if isinstance(team, Mapping) and team.get("team_name"):
        tags["team_name"] = str(team["team_name"])
    return tags


# -- Airflow stats and OpenTelemetry, both optional -----------------------------------------


def _airflow_stats() -> Any:
    """Airflow's Stats, if Airflow is already loaded in this process (never imported here)."""
    if "airflow" not in sys.modules:
        return None
    for module, name in (
        ("airflow.sdk.observability.stats", "Stats"),  # Airflow 3.2+
        ("airflow.stats", "Stats"),  # Airflow 2.x, 3.0, 3.1
    ):
        try:
            return getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            continue
    return None


def _emit(counters: tuple[str, ...], tags: dict[str, str]) -> None:
    stats = _airflow_stats()
    if stats is None:
        return
    for name in counters:
        try:
            stats.incr(name, tags=tags)
        except Exception:  # a metrics backend fault must never fail the job it observes
            _LOG.debug("could not emit %s", name, exc_info=True)


@contextmanager
def _span(op: object) -> Iterator[Any]:
    try:
        from opentelemetry import trace
    except ImportError:
        yield None
        return
    tracer = trace.get_tracer("taskstate.resumable")
    with tracer.start_as_current_span("resumable_job.resume_decision") as span:
        span.set_attribute("operator", type(op).__name__)
        yield span


def _set_span(span: Any, decision: ResumeDecision, key: str) -> None:
    if span is None:
        return
    span.set_attribute("resumable.external_id_key", key)
    span.set_attribute("resumable.decision", decision.action.value)
    span.set_attribute("resumable.recovered", decision.recovered)
    if decision.external_id is not None:
        span.set_attribute("resumable.external_id", str(decision.external_id))
    if decision.status is not None:
        span.set_attribute("resumable.prior_status", decision.status)
    if decision.token is not None:
        span.set_attribute("resumable.idempotency_token", decision.token)
