"""What a try of a resumable job does, decided from the stored state and the job system alone.

Read-only: `decide` reads the task state and asks the job system (status, `find_job`,
`verify`), and writes nothing, so a deferrable operator can act on its answer without blocking
and `resume_or_submit` can report it before acting.

State kept in the task's `task_state_store` (see `taskstate.resumable.core` for the writes):

- `<external_id_key>`: the job id, exactly as Airflow 3.3's mixin stores it (so the UI, other
  tools and Airflow's own mixin read the same value);
- `<external_id_key>__intent`: `{"token": ..., "attempt": n, "external_id": ...}`, written
  *before* the submission and completed with the id after it. An intent without an id means a
  try died inside the submit→persist window; its token is what lets the next try find or
  dedupe the job instead of paying for a second one.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from taskstate.values import JsonValue

INTENT_SUFFIX = "__intent"
MISSING: Any = object()
"""Tells "no such key" apart from any stored value (None is never a stored id)."""


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


class StoreLike(Protocol):
    """What the resumable core needs from a `task_state_store` (taskstate's or Airflow 3.3's).

    `compare_and_set`, when the store has it, makes recording an intent atomic.
    """

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` when it is absent."""

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        """Write `key`; `retention` as the store's own `set` takes it."""


def intent_key(external_id_key: str) -> str:
    """The store key of the intent kept beside the job id under `external_id_key`."""
    return external_id_key + INTENT_SUFFIX


def read_intent(value: Any) -> dict[str, Any] | None:
    """The stored intent, or None when the value is not one (absent, or written by others)."""
    return value if isinstance(value, dict) and isinstance(value.get("token"), str) else None


def decide(
    task_state_store: StoreLike | None,
    *,
    external_id_key: str,
    get_status: Callable[[JsonValue], str],
    is_active: Callable[[str], bool],
    is_succeeded: Callable[[str], bool],
    find_job: Callable[[str], JsonValue | None] | None = None,
    verify: Callable[[JsonValue], bool] | None = None,
    durable: bool = True,
) -> ResumeDecision:
    """What this try must do: see the table in docs/resumable.md.

    `find_job(token)` returns the id of the job submitted with `token`, or None if there is
    none; leave it out (or raise `NotImplementedError`) when the job system cannot search.
    `verify(external_id)` returns False when the stored id now names a different job.
    """
    if not durable:
        return ResumeDecision(ResumeAction.NOT_DURABLE)
    if task_state_store is None:
        return ResumeDecision(ResumeAction.NO_TASK_STATE_STORE)
    store = task_state_store

    def on_job(external_id: JsonValue, recovered: bool) -> ResumeDecision:
        if verify is not None and not verify(external_id):
            return ResumeDecision(
                ResumeAction.TERMINAL_RESUBMIT,
                external_id=external_id,
                recovered=recovered,
                reason="verify_job: the id now names a different job",
            )
        status = get_status(external_id)
        if is_active(status):
            action, reason = ResumeAction.RECONNECT, "the job is still active: waiting on it"
        elif is_succeeded(status):
            action, reason = ResumeAction.ALREADY_SUCCEEDED, "the job succeeded: no polling"
        else:
            action, reason = ResumeAction.TERMINAL_RESUBMIT, "the job did not succeed: a new one"
        return ResumeDecision(
            action, external_id=external_id, status=status, recovered=recovered, reason=reason
        )

    intent = read_intent(store.get(intent_key(external_id_key)))
    if intent is not None and "external_id" not in intent:
        return _decide_lost(intent, find_job, on_job)
    stored = store.get(external_id_key, MISSING)
    if stored is MISSING and intent is not None:
        stored = intent["external_id"]
    if stored is MISSING:
        return ResumeDecision(ResumeAction.FRESH_SUBMIT, reason="no job id stored")
    return on_job(stored, False)


def _decide_lost(
    intent: dict[str, Any],
    find_job: Callable[[str], JsonValue | None] | None,
    on_job: Callable[[JsonValue, bool], ResumeDecision],
) -> ResumeDecision:
    """An intent without an id: the earlier try died (or its submission failed) before the
    id was saved."""
    token = str(intent["token"])
    if "submit_error" in intent:
        return ResumeDecision(
            ResumeAction.FRESH_SUBMIT,
            token=token,
            reason=f"the earlier submit_job raised {intent['submit_error']}",
        )
    found = MISSING
    if find_job is not None:
        with contextlib.suppress(NotImplementedError):  # the mixin's default: cannot search
            found = find_job(token)
    if found is MISSING:
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
    return on_job(found, True)
