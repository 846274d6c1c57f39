"""What the provider subclasses share: the blocking-mode `execute`, the token of the current
submission, and stepping aside for an upstream class that is durable already."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from taskstate.resumable import ResumableJobMixin
from taskstate.resumable.decision import intent_key, read_intent

LOG = logging.getLogger("taskstate.providers")
T = TypeVar("T", bound=type)


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
    """The blocking mode of a provider operator, through `execute_resumable`.

    A subclass says when it blocks (`blocking()`): otherwise (deferrable, asynchronous, not
    waiting for completion) the provider's own `execute` runs unchanged, since a job this task
    does not wait for has nothing to reconnect to in a retry of it.
    """

    def blocking(self) -> bool:
        return not getattr(self, "deferrable", False)

    def execute(self, context: Any, **kwargs: Any) -> Any:
        # `kwargs`: Airflow 2.10/2.11 pass `<Class>__sentinel=...` to `execute`, which only an
        # `execute` defined in an operator's own class body gets unwrapped; the provider's
        # (so wrapped) takes it on the non-blocking path.
        if not self.blocking():
            self.log.info(  # type: ignore[attr-defined]
                "%s: not waiting in this task (deferrable or asynchronous), so the provider's "
                "own execute runs: no crash recovery for this task",
                type(self).__name__,
            )
            return super().execute(context, **kwargs)  # type: ignore[misc]
        return self.execute_resumable(context)

    def recorded_token(self, context: Mapping[str, Any]) -> str | None:
        """The token of the intent the stored id belongs to, or None (no intent: the id was
        written by a class without taskstate's intent record, e.g. upstream's mixin)."""
        store = context.get("task_state_store")
        if store is None:
            return None
        intent = read_intent(store.get(intent_key(self.external_id_key)))
        return None if intent is None else str(intent["token"])
