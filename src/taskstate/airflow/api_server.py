"""The HTTP API on Airflow 3's api-server: users authenticate as with Airflow's own API (the
bearer JWT from `/auth/token`, or on 3.1+ the UI's `_token` cookie) and Airflow's auth manager
decides: task state needs the DAG's task-instance permission for the method, asset state the
asset permission (asked with the asset's id, as Airflow's own asset routes ask). taskstate
tokens are accepted too (checked first; they name their audience)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from taskstate.airflow.hosting import airflow_hosting, asset_id
from taskstate.airflow.versions import installed
from taskstate.api.app import create_app
from taskstate.api.auth import Auth, Method, Principal, TokenAuthenticator, Unauthenticated, bearer
from taskstate.api.tokens import SigningKeys
from taskstate.scope import AssetScope
from taskstate.store import StateStore

COOKIE = "_token"  # Airflow 3's COOKIE_NAME_JWT_TOKEN


class AirflowUser:
    """A user of Airflow's auth manager; answers are cached for the request."""

    admin = False  # the server's own details are for taskstate admin tokens
    try_number = None
    task_instance = None

    def __init__(self, user: Any, auth_manager: Any) -> None:
        self.user = user
        self.auth_manager = auth_manager
        self._dags: dict[tuple[str, Method], bool] = {}
        self._assets: dict[tuple[AssetScope, Method], bool] = {}

    @property
    def subject(self) -> str:
        """As `Principal.subject`: the user's name, as Airflow's auth manager gives it."""
        return str(self.user.get_name())

    def may_task(
        self, dag_id: str, run_id: str, task_id: str, map_index: int | None, method: Method
    ) -> bool:
        """As `Principal.may_task`: Airflow grants per DAG, so this is `may_dag`."""
        return self.may_dag(dag_id, run_id, method)

    def may_dag(self, dag_id: str, run_id: str | None, method: Method) -> bool:
        """As `Principal.may_dag`: asks the auth manager for the DAG's task-instance permission."""
        # Airflow's auth managers grant task-instance access per DAG (DagDetails holds no run).
        if (dag_id, method) not in self._dags:
            from airflow.api_fastapi.auth.managers.models.resource_details import (
                DagAccessEntity,
                DagDetails,
            )

            self._dags[dag_id, method] = bool(
                self.auth_manager.is_authorized_dag(
                    method=method,
                    access_entity=DagAccessEntity.TASK_INSTANCE,
                    details=DagDetails(id=dag_id),
                    user=self.user,
                )
            )
        return self._dags[dag_id, method]

    def may_asset(self, asset: AssetScope, method: Method) -> bool:
        """As `Principal.may_asset`: asks the auth manager for the asset permission, by asset id."""
        # As Airflow's own asset routes do: the asset's id in the details, for auth managers
        # that grant access per asset (one unknown to Airflow is asked about without an id).
        if (asset, method) not in self._assets:
            from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails

            found = asset_id(asset)
            details = AssetDetails(id=None if found is None else str(found))
            self._assets[asset, method] = bool(
                self.auth_manager.is_authorized_asset(
                    method=method, details=details, user=self.user
                )
            )
        return self._assets[asset, method]


def _api_cookie() -> bool:
    row = installed()
    return row is not None and row.api_cookie


async def airflow_user(request: Request) -> Principal | None:
    """Airflow's JWT from the Authorization header or (as Airflow's own API, 3.1+) the UI
    cookie, resolved by its auth manager; None without either, so the request ends as a 401."""
    token = bearer(request) or (request.cookies.get(COOKIE) if _api_cookie() else None)
    if not token:
        return None
    import jwt
    from airflow.api_fastapi.app import get_auth_manager

    auth_manager = get_auth_manager()
    try:
        user = await auth_manager.get_user_from_token(token)
    except jwt.ExpiredSignatureError:
        raise Unauthenticated(
            "the Airflow token has expired; get a new one from /auth/token"
        ) from None
    except jwt.InvalidTokenError:
        raise Unauthenticated("the Airflow token is not valid") from None
    return AirflowUser(user, auth_manager)


def build_app(store: StateStore | None = None) -> FastAPI:
    """The HTTP API app for Airflow 3's api-server: taskstate tokens, then Airflow's users."""
    keys = SigningKeys.load()
    authenticators: list[Any] = [] if keys is None else [TokenAuthenticator(keys)]
    authenticators.append(airflow_user)
    auth = Auth(authenticators, open_access=False)
    return create_app(store or StateStore(), auth, hosting=airflow_hosting())
