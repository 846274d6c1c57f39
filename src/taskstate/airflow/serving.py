"""Whether taskstate's HTTP API is served inside this Airflow (without importing Airflow):
on 2.10–3.2 always; on 3.3+ only when `[state_store] taskstate_mode = taskstate` keeps
taskstate in charge (the upgrade path), since Airflow serves its own state-store routes."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from taskstate.airflow.versions import native_store_active

PLUGIN = "taskstate.airflow.plugin:TaskStatePlugin"


def api_served() -> bool:
    return not native_store_active()  # 3.3+ with taskstate_mode = taskstate: ours serves


def doctor_check() -> tuple[str, str, str]:
    """The `taskstate doctor` line for the HTTP API."""
    if not api_served():
        return (
            "http api",
            "ok",
            "not served by taskstate: Airflow 3.3+ serves its own state-store routes "
            "([state_store] taskstate_mode = taskstate keeps taskstate's at /taskstate)",
        )
    plugins = {ep.value for ep in importlib.metadata.entry_points(group="airflow.plugins")}
    if PLUGIN not in plugins:
        return ("http api", "fail", f"the airflow.plugins entry point {PLUGIN} is missing: "
                "reinstall taskstate (pip install 'taskstate[airflow]')")  # fmt: skip
    missing = [m for m in ("fastapi", "jwt", "a2wsgi") if importlib.util.find_spec(m) is None]
    if missing:
        return ("http api", "warn", f"not served: {', '.join(missing)} not installed "
                "(pip install 'taskstate[airflow]')")  # fmt: skip
    return ("http api", "ok", "served by the taskstate plugin at /taskstate on the "
            "api-server (Airflow 3) or webserver (Airflow 2)")  # fmt: skip
