"""The Airflow part of `taskstate doctor`: which Airflow, which store is in charge, whether the
injection is installed, and whether the backend suits the executor. Never imports Airflow."""

from __future__ import annotations

import importlib.metadata
import re

from taskstate.airflow.versions import airflow_version, native_store_active
from taskstate.backends import resolve_url
from taskstate.errors import TaskStateError
from taskstate.settings import Settings, airflow_option

Check = tuple[str, str, str]

# Executors that run tasks on other machines, where a SQLite file on one of them is not shared.
_DISTRIBUTED = re.compile(r"celery|kubernetes|edge", re.IGNORECASE)


def report() -> list[Check]:
    version = airflow_version()
    if version is None:
        return [("airflow", "ok", "not installed: plain-Python use")]
    checks: list[Check] = [("airflow", "ok", f"Airflow {version}")]
    if native_store_active():
        checks.append(
            (
                "state store in charge",
                "ok",
                "Airflow's own (AIP-103, 3.3+); taskstate does not inject, and DAG code "
                "calling taskstate-only methods (update, compare_and_set) fails on it",
            )
        )
        return checks
    checks.append(("state store in charge", "ok", "taskstate (injected into every task)"))
    checks.append(_injection())
    checks.extend(_executor())
    return checks


def _injection() -> Check:
    names = {ep.value for ep in importlib.metadata.entry_points(group="airflow.policy")}
    if "taskstate.airflow.policy" in names:
        return ("injection", "ok", "cluster policy taskstate.airflow.policy (airflow.policy)")
    return (
        "injection",
        "fail",
        "the airflow.policy entry point taskstate.airflow.policy is missing, so tasks get no "
        "task_state_store: reinstall taskstate (pip install 'taskstate[airflow]') in the "
        "environment Airflow runs in",
    )


def _executor() -> list[Check]:
    try:
        executor = airflow_option("core", "executor") or "(Airflow's default)"
        settings = Settings.load()
    except TaskStateError as exc:
        return [("executor", "fail", str(exc))]
    if not settings.uses_builtin_backend:
        return [("executor", "ok", f"{executor} with the custom backend {settings.backend}")]
    url = resolve_url(settings)
    if _DISTRIBUTED.search(executor) and url.startswith("sqlite"):
        return [
            (
                "executor",
                "warn",
                f"{executor} runs tasks on several machines, but the state store is the "
                "embedded SQLite file of one machine: each machine would keep its own state "
                "and a retry elsewhere would not resume. Use the PostgreSQL backend: set "
                "[state_store] taskstate_url = postgresql://user:pass@host/db (or run Airflow's "
                "metadata DB on PostgreSQL, which taskstate then uses)",
            )
        ]
    return [("executor", "ok", f"{executor} with {url.split(':', 1)[0]}")]
