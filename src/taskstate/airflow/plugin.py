"""The Airflow plugin (entry point `airflow.plugins`): taskstate's HTTP API inside Airflow.

- Airflow 3.0–3.2: the FastAPI app mounted on the api-server at `/taskstate` (`fastapi_apps`).
- Airflow 2.10/2.11: the same routes on the webserver, through a Flask blueprint.
- Airflow 3.3+: Airflow's own store is in charge and the plugin stands aside, unless
  `[state_store] taskstate_mode = taskstate` says taskstate still is (the upgrade path).

The attributes are properties, so the app is built only by the process that serves it (the
api-server or webserver), never by schedulers or workers that merely load plugins.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from taskstate.airflow.hosting import api_served
from taskstate.airflow.versions import installed

BASE_PATH = "/taskstate"


def _hosts_api(plugin_kind: str) -> bool:
    """Whether this plugin attribute carries the API here: served, and the installed Airflow's
    plugin kind for it (`Capabilities.api_plugin`)."""
    row = installed()
    return api_served() and row is not None and row.api_plugin == plugin_kind


@cache
def _fastapi_apps() -> list[dict[str, Any]]:
    if not _hosts_api("fastapi_apps"):
        return []
    from taskstate.airflow.api_server import build_app

    return [{"app": build_app(), "url_prefix": BASE_PATH, "name": "taskstate"}]


@cache
def _flask_blueprints() -> list[Any]:
    if not _hosts_api("flask_blueprints"):
        return []
    from taskstate.airflow.webserver import blueprint

    return [blueprint()]


def ui_extensions() -> dict[str, Any]:
    """The UI's additions to this plugin (external views, menu links, appbuilder views, extra
    links), by AirflowPlugin attribute name: `taskstate.airflow.ui_extensions`."""
    from taskstate.airflow.ui_extensions import plugin_extensions

    return plugin_extensions()


class TaskStatePlugin(AirflowPlugin):  # type: ignore[misc]  # Airflow is untyped here
    """taskstate's Airflow plugin: the HTTP API (and the state pages) on the api-server or
    webserver, and where the pages appear in Airflow's UI, as the installed Airflow's
    capabilities allow."""

    name = "taskstate"

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:
        """The API app for Airflow 3's api-server, built on first use; empty elsewhere."""
        return _fastapi_apps()

    @property
    def flask_blueprints(self) -> list[Any]:
        """The API's blueprint for Airflow 2's webserver, built on first use; empty elsewhere."""
        return _flask_blueprints()


for _attribute, _values in ui_extensions().items():
    setattr(TaskStatePlugin, _attribute, _values)
