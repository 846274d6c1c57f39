"""What the provider subclasses share: `execute` in blocking and deferrable mode, the token of
the current submission, and stepping aside for an upstream class that is durable already."""

from __future__ import annotations

import importlib
import inspect
import logging
import time
from collections.abc import Mapping
from typing import Any, TypeVar

from taskstate.resumable import ResumableJobMixin
from taskstate.resumable.decision import intent_key, read_intent

LOG = logging.getLogger("taskstate.providers")
T = TypeVar("T", bound=type)
Trig = TypeVar("Trig")


def upstream_durable(cls: type) -> type | None:
    """The real `ResumableJobMixin` `cls` subclasses, or None when it has none.

    Real means taskstate's (put on `airflow.sdk` by `[state_store] taskstate_provider_durable`)
    or Airflow 3.3's own; the providers' stand-in below 3.3 (which always submits a fresh job)
    does not count.
    """
    real: list[type] = [ResumableJobMixin]
    try:
        sdk = importlib.import_module("airflow.sdk")
        native = getattr(sdk, "ResumableJobMixin", None)
    except ImportError:  # Airflow 2.x has no airflow.sdk
        native = None
    if isinstance(native, type):
        real.append(native)
    return next((k for k in cls.__mro__ if k in real), None)


def step_aside(ours: T, upstream: T) -> T:
    """`upstream` when the installed provider's class is durable already, else `ours`.

    Stepping aside keeps upstream's `external_id_key` and code, so a job id stored by either
    class is found by the other (ours uses the same key upstream uses where upstream has one).
    """
    mixin = upstream_durable(upstream)
    if mixin is None:
        return ours
    LOG.info(
        "%s.%s is durable already (ResumableJobMixin from %s, external_id_key %r): "
        "taskstate.providers uses it as it is",
        upstream.__module__,
        upstream.__name__,
        mixin.__module__,
        getattr(upstream, "external_id_key", None),
    )
    return upstream


class ProviderJob(ResumableJobMixin):
    """A provider operator's waiting modes through the mixin: blocking (`execute_resumable`)
    and deferrable (`execute_deferrable`, deferring to the provider's own trigger).

    A subclass says whether the task waits for its job (`waits()`) and which trigger polls a
    job (`job_trigger`). A task that does not wait (asynchronous, not waiting for completion)
    runs the provider's own `execute` unchanged, since a job this task does not wait for has
    nothing to reconnect to in a retry of it; so does a deferrable task with `durable=False`.
    """

    def waits(self) -> bool:
        return True

    def deferring(self) -> bool:
        return bool(getattr(self, "deferrable", False))

    def execute(self, context: Any, **kwargs: Any) -> Any:
        # `kwargs`: Airflow 2.10/2.11 pass `<Class>__sentinel=...` to `execute`, which only an
        # `execute` defined in an operator's own class body gets unwrapped; the provider's
        # (so wrapped) takes it on the non-durable paths.
        if not self.waits():
            self.log.info(  # type: ignore[attr-defined]
                "%s: not waiting in this task (asynchronous, or not waiting for completion), so "
                "the provider's own execute runs: no crash recovery for this task",
                type(self).__name__,
            )
            return super().execute(context, **kwargs)  # type: ignore[misc]
        if not self.deferring():
            return self.execute_resumable(context)
        if not self.durable:
            return super().execute(context, **kwargs)  # type: ignore[misc]
        return self.execute_deferrable(context)

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        """The provider's trigger polling `external_id`, built as the provider's own
        deferrable `execute` builds it."""
        raise NotImplementedError

    def deadlines(self, timeout: float) -> dict[str, float | None]:
        """A trigger's `end_time` (`timeout` seconds from now: how long it waits) and
        `execution_deadline` (the task's `execution_timeout` from now), as the providers'
        deferrable `execute` computes them."""
        now = time.time()
        limit = getattr(self, "execution_timeout", None)
        return {
            "end_time": now + timeout,
            "execution_deadline": None if limit is None else now + limit.total_seconds(),
        }

    def defer_job(self, external_id: Any, context: Any) -> Any:
        self.defer(  # type: ignore[attr-defined]
            trigger=self.job_trigger(external_id, context),
            method_name="execute_complete",
            timeout=getattr(self, "execution_timeout", None),
        )

    def execute_complete(self, context: Any, event: Any = None, **kwargs: Any) -> Any:
        """The end of the deferral: the result of the job in the task's state, its status asked
        from the service (the providers' events each have their own shape). A job still
        running (the trigger gave up) is deferred on again; one that failed raises
        `JobFailedError` and the next try submits a new job."""
        if not self.durable:
            return super().execute_complete(context, event, **kwargs)  # type: ignore[misc]
        return self.complete_deferred(context, None)

    def recorded_token(self, context: Mapping[str, Any]) -> str | None:
        """The token of the intent the stored id belongs to, or None (no intent: the id was
        written by a class without taskstate's intent record, e.g. upstream's mixin)."""
        store = context.get("task_state_store")
        if store is None:
            return None
        intent = read_intent(store.get(intent_key(self.external_id_key)))
        return None if intent is None else str(intent["token"])


def build_trigger(trigger: type[Trig], **kwargs: Any) -> Trig:
    """`trigger(**kwargs)` with the arguments the installed provider release's trigger takes
    (releases add some: `verify`, `botocore_config`, `execution_deadline`...) and no others."""
    taken = inspect.signature(trigger.__init__).parameters
    return trigger(**{name: value for name, value in kwargs.items() if name in taken})
