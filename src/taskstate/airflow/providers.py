"""`[state_store] taskstate_provider_durable`: upstream providers' `durable=True` on Airflow
3.0–3.2.

Provider operators written for Airflow 3.3's `ResumableJobMixin` (Amazon's
`RedshiftDataOperator` and `GlueJobOperator` since apache-airflow-providers-amazon 9.38) get the
mixin from `airflow.sdk`: through `airflow.providers.common.compat.sdk`, which tries
`airflow.sdk` first and else hands out a stand-in that submits a new job on every try, or with
their own `try: from airflow.sdk import ResumableJobMixin`. Below 3.3 `airflow.sdk` has no such
name, so they get the stand-in and `durable=True` does nothing.

With the setting on, `install()` puts taskstate's mixin on `airflow.sdk`, so those imports
resolve to it and the operators take their durable path against the injected
`task_state_store`. It has to happen before any provider module is imported, in every process
that may import one. The cluster-policy entry point (`taskstate.airflow.policy`) is that place:
Airflow loads it in `settings.initialize()`, inside `import airflow` itself, which is the first
thing every Airflow process does (scheduler, executors and the task processes they start, `dags
test`, `tasks test`, the dag-processor, Celery workers) and which any `import airflow.<x>`
triggers first. `airflow.sdk`'s `__init__` only declares lazy names, so importing it then
creates no cycle. Airflow 2.10/2.11 have no `airflow.sdk`: nothing is faked there, since a
made-up `airflow.sdk` would change every provider's compatibility imports.
"""

from __future__ import annotations

import importlib
import logging

from taskstate.airflow.versions import airflow_version, capabilities
from taskstate.errors import TaskStateError
from taskstate.resumable import ResumableJobMixin
from taskstate.settings import setting

OPTION = "[state_store] taskstate_provider_durable"
_LOG = logging.getLogger(__name__)


def unsupported_reason() -> str | None:
    """Why the installed Airflow cannot take the setting, or None when it can (3.0–3.2)."""
    version = airflow_version()
    if version is None:
        return "Airflow is not installed"
    mixin = capabilities(version).provider_mixin
    if mixin == "none":
        return f"Airflow {version} has no airflow.sdk for provider operators to import it from"
    if mixin == "airflow":
        return f"Airflow {version} ships its own ResumableJobMixin, which providers use"
    return None


def install() -> bool:
    """Make `airflow.sdk.ResumableJobMixin` taskstate's when the setting asks for it.

    Returns whether it did. Never raises: it runs inside `import airflow`, and a fault here
    must not keep Airflow from starting (it logs why and leaves the providers' stand-in).
    """
    try:
        if not setting("provider_durable"):
            return False
    except TaskStateError as exc:
        _LOG.warning("%s: %s; providers' durable=True keeps doing nothing", OPTION, exc)
        return False
    reason = unsupported_reason()
    if reason is not None:
        _LOG.warning("%s = True has no effect: %s", OPTION, reason)
        return False
    try:
        sdk = importlib.import_module("airflow.sdk")
    except ImportError as exc:
        _LOG.warning("%s = True has no effect: airflow.sdk does not import (%s)", OPTION, exc)
        return False
    # A name that module lacks below 3.3 (mypy cannot know it is being added).
    sdk.ResumableJobMixin = ResumableJobMixin  # type: ignore[attr-defined]
    return True
