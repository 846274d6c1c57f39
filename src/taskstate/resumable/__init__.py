"""Crash-safe external jobs: one job per task instance, whatever crashes.

- `core.resume_or_submit(...)`: the logic as a free function over a store and callbacks
  (Airflow 3.3's shape), for deferrable operators, runners and plain scripts;
- `decision`: what a try does (`decide`, `ResumeAction`, `ResumeDecision`), read-only;
- `durable`: the `durable=` argument in every spelling;
- `reporting`: log lines, the `resumable_job.*` counters and the OpenTelemetry span;
- `mixin.ResumableJobMixin`: binds an operator's methods to the core.
"""

from taskstate.resumable.core import idempotency_token, resume_or_submit
from taskstate.resumable.decision import INTENT_SUFFIX, ResumeAction, ResumeDecision, decide
from taskstate.resumable.mixin import ResumableJobMixin

__all__ = [
    "INTENT_SUFFIX",
    "ResumableJobMixin",
    "ResumeAction",
    "ResumeDecision",
    "decide",
    "idempotency_token",
    "resume_or_submit",
]
