"""Airflow 2's view: the state pages inside the webserver's own layout (menu, login), with the
CSRF token its cookie-authenticated writes need (`X-CSRFToken`).

Only signed-in users reach it; what they may see and change is the API's decision (their FAB
permissions), as everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import redirect, request
from flask_appbuilder import BaseView, expose
from flask_login import current_user
from flask_wtf.csrf import generate_csrf

import taskstate.ui
from taskstate.api.routes_ui import app_container


class TaskStateView(BaseView):  # type: ignore[misc]  # Flask AppBuilder is untyped
    """Browse → Task State on Airflow 2: the state pages in the webserver's own layout."""

    route_base = "/taskstate-ui"
    default_view = "index"
    # The template ships with the pages (taskstate/ui/templates), this view's Jinja layout.
    template_folder = str(Path(taskstate.ui.__file__).parent / "templates")

    def _page(self, view: str = "") -> Any:
        if not current_user.is_authenticated:
            # To Airflow's sign-in page and back, as Airflow's own views do (flask_login's
            # `unauthorized()` builds an endpoint `login` FAB does not have: a 500).
            from airflow.www.extensions.init_auth_manager import get_auth_manager

            return redirect(get_auth_manager().get_url_login(next_url=request.url))
        base = f"{request.script_root}/taskstate"
        container = app_container(
            api=f"{base}/api/v2/", ui=f"{base}/ui/", csrf=generate_csrf(), view=view
        )
        return self.render_template("taskstate/fab.html", container=container, ui=f"{base}/ui/")

    @expose("/")  # type: ignore[untyped-decorator]
    def index(self) -> Any:
        """The pages, opened on the task-instance view (or the query's task instance)."""
        return self._page()

    @expose("/assets")  # type: ignore[untyped-decorator]
    def assets(self) -> Any:
        """The pages, opened on the asset list (Browse → Asset State)."""
        return self._page("assets")
