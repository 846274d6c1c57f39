"""How a resume decision is reported: a log line, Airflow 3.3's `resumable_job.*` counters
(`taskstate.metrics.count_now`: Airflow's `Stats` inside Airflow, taskstate's own StatsD,
OpenTelemetry and Prometheus sinks without it), and an OpenTelemetry span with Airflow 3.3's
attribute names.

`import taskstate` must not import Airflow or OpenTelemetry: Airflow's stats are looked up only
when a decision is reported, and only if Airflow is already loaded; OpenTelemetry only if it is
installed. A fault in either never fails the job it observes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from taskstate.metrics import airflow_stats as airflow_stats  # tests/airflow probes import it here
from taskstate.metrics import count_now
from taskstate.resumable.decision import ResumeAction, ResumeDecision

LOG = logging.getLogger("taskstate.resumable")

_COUNTERS: dict[ResumeAction, tuple[str, ...]] = {
    ResumeAction.FRESH_SUBMIT: ("resumable_job.fresh_submit",),
    ResumeAction.RECONNECT: ("resumable_job.reconnect_success",),
    ResumeAction.ALREADY_SUCCEEDED: ("resumable_job.already_succeeded",),
    ResumeAction.TERMINAL_RESUBMIT: ("resumable_job.terminal_resubmit",),
    ResumeAction.RECOVER_FROM_INTENT: (),
}
_WARNED = {ResumeAction.TERMINAL_RESUBMIT, ResumeAction.RECOVER_FROM_INTENT}


def logger_for(obj: object) -> Any:
    """An operator's own `log` (Airflow's task log), else the `taskstate.resumable` logger."""
    log = getattr(obj, "log", None)
    return log if callable(getattr(log, "warning", None)) else LOG


def stats_tags(operator_name: str, ti: object) -> dict[str, str]:
    """Airflow's tags: the operator's class name, plus the team of a multi-team deployment."""
    tags = {"operator": operator_name}
    team = getattr(ti, "stats_tags", None)
    if isinstance(team, Mapping) and team.get("team_name"):
        tags["team_name"] = str(team["team_name"])
    return tags


@contextmanager
def decision_span(operator_name: str) -> Iterator[Any]:
    """The `resumable_job.resume_decision` span (None without OpenTelemetry)."""
    try:
        from opentelemetry import trace
    except ImportError:
        yield None
        return
    tracer = trace.get_tracer("taskstate.resumable")
    with tracer.start_as_current_span("resumable_job.resume_decision") as span:
        span.set_attribute("operator", operator_name)
        yield span


def report(
    decision: ResumeDecision,
    *,
    external_id_key: str,
    log: Any,
    tags: Mapping[str, str],
    span: Any,
) -> None:
    """Log the decision, count it, and describe it on the span."""
    action = decision.action
    if action is ResumeAction.NOT_DURABLE:
        return
    if action is ResumeAction.NO_TASK_STATE_STORE:
        log.warning(
            "task_state_store not available in context, crash recovery is disabled for this "
            "run: submitting without saving the job id"
        )
        _describe(span, decision, external_id_key)
        return
    counters = _COUNTERS[action]
    if decision.external_id is not None and action is not ResumeAction.FRESH_SUBMIT:
        counters = ("resumable_job.reconnect_attempt", *counters)
    if decision.recovered or decision.token is not None:
        counters = ("resumable_job.recover_from_intent", *counters)
    _emit(counters, dict(tags))
    _describe(span, decision, external_id_key)
    level = "warning" if action in _WARNED else "info"
    facts = (
        [f"{external_id_key}={decision.external_id!r}"] if decision.external_id is not None else []
    )
    if decision.status is not None:
        facts.append(f"status {decision.status}")
    if decision.recovered:
        facts.append("id recovered by find_job")
    if decision.token is not None:
        facts.append(f"idempotency token {decision.token}")
    getattr(log, level)(
        "Resumable job: %s (%s) — %s",
        action.value,
        ", ".join(facts) or external_id_key,
        decision.reason,
    )


def _emit(counters: tuple[str, ...], tags: dict[str, str]) -> None:
    for name in counters:
        try:
            count_now(name, tags)
        except Exception:  # a metrics backend fault must never fail the job it observes
            LOG.debug("could not emit %s", name, exc_info=True)


def _describe(span: Any, decision: ResumeDecision, key: str) -> None:
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
