"""Where the state pages appear inside Airflow (the plugin's `ui_extensions()` hook asks here);
which of these a version gets is its row's `ui` in `taskstate.airflow.versions.RELEASES`.

- 3.1/3.2: a "Task State" tab on every task instance (`external_views`, destination
  `task_instance`, an iframe of `taskstate/ui/ti/...`) and a "State" nav entry to the DAG and
  asset pages: neither version offers an `asset` destination (3.1: nav, dag, dag_run, task,
  task_instance; 3.2 adds base). The hrefs are relative, so Airflow's `<base href>` (from
  `[api] base_url`) puts them under any sub-path. The UI's `_token` cookie is HttpOnly on both
  and the iframe is same-origin (`allow-same-origin`), so the page's API calls carry it.
- 3.0: plugins have no external views or nav entries: the pages are reached by URL only.
- 2.10/2.11: a Flask AppBuilder view (Browse → Task State) that embeds the pages with the
  webserver's CSRF token, a menu entry for asset state, and a global "Task State" extra link.
- 3.3+: nothing unless taskstate serves the API there (`taskstate_mode = taskstate`).

Built lazily where it matters: the FAB view imports Flask, which schedulers and workers (that
also load plugins) never need.
"""

from __future__ import annotations

from typing import Any

from taskstate.airflow.hosting import api_served
from taskstate.airflow.versions import installed

TI_HREF = "taskstate/ui/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}"


def external_views() -> list[dict[str, Any]]:
    """The "Task State" tab on task instances and the "State" entry in the Browse menu, each
    kept only where the Airflow version offers its destination."""
    return [
        {
            "name": "Task State",
            "href": TI_HREF,
            "destination": "task_instance",
            "url_route": "task-state",
        },
        {
            "name": "State",
            "href": "taskstate/ui/",
            "destination": "nav",
            "category": "browse",
            "url_route": "taskstate",
        },
    ]


def _appbuilder_views(plugin: object) -> list[dict[str, Any]]:
    from taskstate.airflow.fab_view import TaskStateView

    return [{"name": "Task State", "category": "Browse", "view": TaskStateView()}]


def plugin_extensions() -> dict[str, Any]:
    """AirflowPlugin attributes by name; a `property` is read only where Airflow uses it."""
    row = installed()
    if row is None or not api_served():
        return {}
    if row.ui == "external_views":
        offered = [v for v in external_views() if v["destination"] in row.ui_destinations]
        return {"external_views": offered}
    if row.ui == "url_only":
        return {}
    from taskstate.airflow.extra_link import TaskStateLink

    return {
        "appbuilder_views": property(_appbuilder_views),
        "appbuilder_menu_items": [
            {"name": "Asset State", "href": "TaskStateView.assets", "category": "Browse"}
        ],
        "global_operator_extra_links": [TaskStateLink()],
    }
