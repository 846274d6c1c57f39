"""The HTTP API on Airflow 2's webserver: a Flask blueprint at `/taskstate` hands each request
to the same ASGI app (through a2wsgi), so there is one route table.

Authentication is Airflow's: its API auth backends (`[api] auth_backends`: basic auth, the UI
session, ...), checked in the Flask request where they work. The user's FAB permissions for the
request's method (the DAGs they may read / edit, task-instance and dataset access) are read
there too and carried to the app in the WSGI environ. A taskstate bearer token skips Airflow's
backends and is checked by the app. The blueprint is exempt from Flask-WTF's CSRF check for
requests the `Authorization` header authenticated; a write the session cookie authenticated must
carry the CSRF token, whatever other header comes with it.

Asset-state permissions are FAB's dataset permissions, mapped as Airflow 2's own dataset routes
map them: reading is `can_read`, writing a key is `can_create` (what creating a dataset event
needs: roles User, Op and Admin hold it), deleting is `can_delete` (Op and Admin). FAB's roles
have no `can_edit` on datasets.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from starlette.requests import Request

from taskstate.airflow.hosting import airflow_hosting
from taskstate.api.app import create_app
from taskstate.api.auth import (
    Auth,
    Method,
    Principal,
    TokenAuthenticator,
    is_taskstate_token,
    parse_bearer,
)
from taskstate.api.tokens import SigningKeys
from taskstate.scope import AssetScope
from taskstate.store import StateStore

ENVIRON_KEY = "taskstate.principal"
PREFIX = "/taskstate"
_PUBLIC = frozenset({"health", "openapi.json", "docs"})
_METHODS: dict[str, Method] = {
    "GET": "GET",
    "HEAD": "GET",
    "PUT": "PUT",
    "PATCH": "PUT",
    "POST": "PUT",  # a restore of state history (docs/history.md): a write
    "DELETE": "DELETE",
}
# The dataset permission each method needs: Airflow 2's dataset routes ask for POST (can_create)
# to add to a dataset and DELETE to remove from it; no FAB role has PUT (can_edit) on datasets.
_DATASET_METHODS = {"GET": "GET", "PUT": "POST", "DELETE": "DELETE"}


class FabUser:
    """An Airflow 2 user's permissions for one request's method, read in the Flask request."""

    admin = False  # the server's own details are for taskstate admin tokens
    try_number = None
    task_instance = None

    def __init__(
        self,
        subject: str,
        method: Method,
        dag_ids: set[str],
        tasks_ok: bool,
        assets_ok: bool,
        anonymous: bool = False,
    ) -> None:
        self.subject = subject
        self.anonymous = anonymous
        self.method = method
        self.dag_ids = dag_ids
        self.tasks_ok = tasks_ok
        self.assets_ok = assets_ok

    def may_task(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None, method: Method
    ) -> bool:
        """As `Principal.may_task`: FAB grants per DAG, so this is `may_dag`."""
        return self.may_dag(dag_id, run_id, method)

    def may_dag(self, dag_id: str, run_id: str | None, method: Method) -> bool:
        """As `Principal.may_dag`: the request's method, on a DAG FAB permits, with TI access."""
        # FAB grants per DAG, never per run or task.
        return method == self.method and self.tasks_ok and dag_id in self.dag_ids

    def may_asset(self, asset: AssetScope, method: Method) -> bool:
        """As `Principal.may_asset`: the request's method and FAB's dataset permission."""
        return method == self.method and self.assets_ok

    def may_anything(self) -> bool:
        """Whether the user may touch any state at all (some DAG's tasks, or datasets)."""
        return (self.tasks_ok and bool(self.dag_ids)) or self.assets_ok


def fab_user(method: Method) -> FabUser:
    """The current Flask user's permissions, as FAB's auth manager grants them: the DAG's
    `can_read` (GET) or `can_edit` (writes), the task-instance permission and the dataset
    permission (`_DATASET_METHODS`)."""
    from airflow.auth.managers.models.resource_details import DagAccessEntity
    from airflow.www.extensions.init_auth_manager import get_auth_manager

    manager = get_auth_manager()
    user = manager.get_user()
    dag_method = "GET" if method == "GET" else "PUT"
    return FabUser(
        subject=str(manager.get_user_name()),
        method=method,
        dag_ids=set(manager.get_permitted_dag_ids(methods=[dag_method], user=user)),
        tasks_ok=manager.is_authorized_dag(
            method=method, access_entity=DagAccessEntity.TASK_INSTANCE, user=user
        ),
        assets_ok=manager.is_authorized_dataset(method=_DATASET_METHODS[method], user=user),
        anonymous=bool(getattr(user, "is_anonymous", False)),
    )


async def from_flask(request: Request) -> Principal | None:
    """The user the blueprint authenticated (only the bridge can set the WSGI environ)."""
    environ = request.scope.get("wsgi_environ") or {}
    principal: Principal | None = environ.get(ENVIRON_KEY)
    return principal


@cache
def _wsgi_app() -> Any:
    """Built on the first request, in the gunicorn worker: no event-loop thread or database
    connection is created before the webserver forks."""
    from a2wsgi import ASGIMiddleware

    keys = SigningKeys.load()
    authenticators: list[Any] = [] if keys is None else [TokenAuthenticator(keys)]
    authenticators.append(from_flask)
    auth = Auth(authenticators, open_access=False)
    app: Any = create_app(StateStore(), auth, hosting=airflow_hosting())  # a2wsgi's ASGI type
    return ASGIMiddleware(app)


def _taskstate_bearer(header: str | None) -> bool:
    token = parse_bearer(header)
    return token is not None and is_taskstate_token(token)


def _authenticate() -> bool:
    """Run Airflow's API auth backends; True when the `Authorization` header authenticated the
    user, False when the session did (or nobody did: `Unauthenticated` is raised then).

    With a header, the backends are first run with the session hidden (flask_login's user for
    the request set to anonymous), so a header that authenticates nobody (`Basic Og==`) cannot
    ride on the session's sign-in and skip the CSRF check."""
    from airflow.api_connexion.exceptions import Unauthenticated
    from airflow.api_connexion.security import check_authentication
    from flask import current_app, g, request

    if request.headers.get("Authorization"):
        manager: Any = current_app.login_manager  # type: ignore[attr-defined]  # flask_login
        g._login_user = manager.anonymous_user()
        try:
            check_authentication()
            if not g._login_user.is_anonymous:  # not merely AUTH_ROLE_PUBLIC
                return True
        except Unauthenticated:
            pass
        g.pop("_login_user", None)  # flask_login loads the session's user again
    check_authentication()
    return False


def blueprint() -> Any:
    """The Flask blueprint that serves the HTTP API under `/taskstate` on Airflow 2's webserver."""
    from airflow.api_connexion.exceptions import Unauthenticated
    from airflow.www.app import csrf
    from flask import Blueprint, jsonify, request
    from werkzeug.wrappers import Response

    bp = Blueprint("taskstate_api", __name__, url_prefix=PREFIX)
    csrf.exempt(bp)  # re-applied below to cookie-authenticated writes only

    @bp.route("/", defaults={"rest": ""}, methods=list(_METHODS))
    @bp.route("/<path:rest>", methods=list(_METHODS))
    def dispatch(rest: str) -> Any:
        environ = dict(request.environ)
        method = _METHODS[request.method]
        if rest not in _PUBLIC and not _taskstate_bearer(request.headers.get("Authorization")):
            by_header = False
            try:
                by_header = _authenticate()
                user = fab_user(method)
            except Unauthenticated:
                user = None
            # FAB lets anonymous callers in as AUTH_ROLE_PUBLIC ("Public", no permissions, by
            # default): one that may do nothing here is asked to authenticate, not refused.
            if user is None or (user.anonymous and not user.may_anything()):
                response = jsonify(detail="authentication required (Airflow's API auth backends)")
                response.status_code = 401
                response.headers["WWW-Authenticate"] = "Basic"
                return response
            if not by_header and method != "GET":
                csrf.protect()  # the UI's session cookie: a write needs the CSRF token
            environ[ENVIRON_KEY] = user
        script = environ.get("SCRIPT_NAME", "")
        environ["SCRIPT_NAME"] = script + PREFIX
        environ["PATH_INFO"] = environ["PATH_INFO"][len(PREFIX) :]
        return Response.from_app(_wsgi_app(), environ)

    return bp
