"""The Airflow part of `taskstate doctor`: which Airflow, which store is in charge, whether the
injection is installed, whether providers' `durable=True` takes effect, and whether the backend
suits the executor. Never imports Airflow (that one check starts a fresh Airflow process)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from taskstate.airflow import providers
from taskstate.airflow.executors import (
    Executor,
    configured_executors,
    refusal,
    uses_default_sqlite,
)
from taskstate.airflow.hosting import doctor_check as api_doctor_check
from taskstate.airflow.versions import (
    airflow_version,
    native_store_active,
    native_store_available,
)
from taskstate.backends import resolve_url
from taskstate.errors import TaskStateError
from taskstate.settings import Settings, setting

Check = tuple[str, str, str]


def report() -> list[Check]:
    """The Airflow checks of `taskstate doctor`, as (check, status, detail): which Airflow, the
    HTTP API, which store is in charge, and then the injection, providers' `durable=True` and
    each executor (or, with Airflow's own store in charge, state not yet migrated)."""
    version = airflow_version()
    if version is None:
        return [("airflow", "ok", "not installed: plain-Python use")]
    checks: list[Check] = [("airflow", "ok", f"Airflow {version}"), api_doctor_check()]
    if native_store_active():
        checks.append(
            (
                "state store in charge",
                "ok",
                "Airflow's own (AIP-103, 3.3+; [state_store] taskstate_mode = native): taskstate "
                "does not inject, and a call to a taskstate-only method (update, "
                "compare_and_set) fails with an error naming it",
            )
        )
        checks.append(_unmigrated())
        return checks
    if native_store_available():
        checks.append(
            (
                "state store in charge",
                "ok",
                "taskstate ([state_store] taskstate_mode = taskstate on Airflow 3.3+): injected "
                "in place of Airflow's accessors; Airflow's own state tab shows its native "
                "store, which stays empty",
            )
        )
    else:
        checks.append(("state store in charge", "ok", "taskstate (injected into every task)"))
    checks.append(_injection())
    checks.append(_provider_durable(version))
    checks.extend(_executor())
    return checks


def _unmigrated() -> Check:
    try:
        from taskstate.airflow.migrate import open_existing_store, unmigrated_dags

        store = open_existing_store()
        if store is None:
            return ("unmigrated state", "ok", "taskstate's store does not exist here")
        with store:
            dags = unmigrated_dags(store)
    except Exception as exc:  # doctor reports every failure instead of stopping at one
        return ("unmigrated state", "warn", f"cannot read taskstate's store: {exc}")
    if not dags:
        return ("unmigrated state", "ok", "no taskstate state left to migrate")
    listed = ", ".join(f"{dag} ({n} task instances)" for dag, n in sorted(dags.items()))
    return (
        "unmigrated state",
        "warn",
        f"taskstate's store holds state never copied into Airflow's: {listed}; tasks now read "
        "Airflow's store. Run `taskstate migrate-to-airflow` (see docs/upgrade.md)",
    )


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


def _provider_durable(version: str) -> Check:
    """The setting, and whether a fresh Airflow process really resolves the mixin to ours."""
    name = "provider durable"
    try:
        on = setting("provider_durable")
    except TaskStateError as exc:
        return (name, "fail", str(exc))
    reason = providers.unsupported_reason()
    if not on:
        effect = (
            f"provider operators' durable=True does nothing on Airflow {version} (they get the "
            "providers' stand-in mixin); True makes them resume (docs/providers.md)"
        )
        return (name, "ok", f"off ({providers.OPTION} = False): {reason or effect}")
    if reason is not None:
        return (name, "warn", f"{providers.OPTION} = True is inactive: {reason}")
    # Checked in a fresh interpreter: the setting acts inside `import airflow`.
    code = (
        "import airflow.sdk, taskstate; "
        "print(airflow.sdk.__dict__.get('ResumableJobMixin') is taskstate.ResumableJobMixin)"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (name, "fail", f"{providers.OPTION} = True, but checking it failed: {exc}")
    if proc.stdout.strip().endswith("True"):
        return (
            name,
            "ok",
            "on and active: airflow.sdk.ResumableJobMixin is taskstate's in a fresh Airflow "
            "process, so provider operators' durable=True resumes their jobs (docs/providers.md)",
        )
    return (
        name,
        "fail",
        f"{providers.OPTION} = True, but a fresh Airflow process does not resolve "
        "airflow.sdk.ResumableJobMixin to taskstate's (is the taskstate.airflow.policy entry "
        f"point installed?): {(proc.stdout + proc.stderr).strip()[-500:]}",
    )


def _executor() -> list[Check]:
    """One check per configured executor: may its tasks land on the embedded SQLite file?"""
    try:
        executors = configured_executors()
        settings = Settings.load()
    except TaskStateError as exc:
        return [("executor", "fail", str(exc))]
    return [(f"executor {e.alias or e.name}", *_executor_status(e, settings)) for e in executors]


def _executor_status(executor: Executor, settings: Settings) -> tuple[str, str]:
    name = executor.name
    if not settings.uses_builtin_backend:
        return "ok", f"{name} with the custom backend {settings.backend}"
    url = resolve_url(settings)
    scheme = url.split(":", 1)[0]
    if executor.reach == "local" or not url.startswith("sqlite:"):
        return "ok", f"{name} with {scheme}"
    if uses_default_sqlite(settings):
        if executor.reach == "unknown":
            return "warn", (
                f"taskstate cannot tell whether {name} runs tasks on other machines; if it does, "
                + refusal(name, settings)
            )
        where = " (tasks in its Kubernetes queue)" if executor.reach == "by queue" else ""
        return "fail", f"tasks are refused{where}: " + refusal(name, settings)
    return "warn", (
        f"{name} with taskstate_url = {url}: every machine that runs tasks must see this very "
        "file (a shared volume), else a retry elsewhere starts from nothing"
    )
