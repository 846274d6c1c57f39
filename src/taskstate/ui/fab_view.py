"""Airflow 2's view: the state pages inside the webserver's own layout (menu, login), with the
CSRF token its cookie-authenticated writes need (`X-CSRFToken`).

Only signed-in users reach it; what they may see and change is the API's decision (their FAB
permissions), as everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import current_app, request
from flask_appbuilder import BaseView, expose
from flask_login import current_user
from flask_wtf.csrf import generate_csrf

from taskstate.ui.pages import app_container


class TaskStateView(BaseView):  # type: ignore[misc]  # Flask AppBuilder is untyped
    route_base = "/taskstate-ui"
    default_view = "index"
    template_folder = str(Path(__file__).parent / "templates")

    def _page(self, view: str = "") -> Any:
        if not current_user.is_authenticated:
            manager: Any = current_app.login_manager  # type: ignore[attr-defined]  # flask_login
            return manager.unauthorized()  # to the sign-in page, and back
        base = f"{request.script_root}/taskstate"
        container = app_container(
            api=f"{base}/api/v2/", ui=f"{base}/ui/", csrf=generate_csrf(), view=view
        )
        return self.render_template("taskstate/fab.html", container=container, ui=f"{base}/ui/")

    @expose("/")  # type: ignore[untyped-decorator]
    def index(self) -> Any:
        return self._page()

    @expose("/assets")  # type: ignore[untyped-decorator]
    def assets(self) -> Any:
        return self._page("assets")
