"""Crash-safe external jobs: one job per task instance, whatever crashes.

- `core.resume_or_submit(...)`: the logic as a free function over a store and callbacks
  (Airflow 3.3's shape), for runners and plain scripts; `core.resume_or_defer(...)` and
  `core.complete_deferred(...)` the same for deferrable operators (docs/deferrable.md);
- `decision`: what a try does (`decide`, `ResumeAction`, `ResumeDecision`), read-only;
- `durable`: the `durable=` argument in every spelling;
- `reporting`: log lines, the `resumable_job.*` counters and the OpenTelemetry span;
- `mixin.ResumableJobMixin`: binds an operator's methods to the core.
"""

from taskstate.resumable.core import (
    complete_deferred,
    idempotency_token,
    resume_or_defer,
    resume_or_submit,
)
from taskstate.resumable.decision import INTENT_SUFFIX, ResumeAction, ResumeDecision, decide
from taskstate.resumable.mixin import ResumableJobMixin

__all__ = [
    "INTENT_SUFFIX",
    "ResumableJobMixin",
    "ResumeAction",
    "ResumeDecision",
    "complete_deferred",
    "decide",
    "idempotency_token",
    "resume_or_defer",
    "resume_or_submit",
]
