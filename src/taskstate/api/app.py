"""`create_app(store, auth)`: the one FastAPI app, whatever hosts it.

Routes are relative to the base path `/taskstate`: `taskstate serve` mounts the app there,
Airflow 3's api-server mounts it there through the plugin's `fastapi_apps`, and Airflow 2's
webserver dispatches `/taskstate/...` to it. One route table either way.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.utils import get_openapi
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import taskstate
from taskstate.api import errors, models, routes_discovery, routes_metrics, routes_state
from taskstate.api.auth import Auth
from taskstate.api.context import AppContext, Hosting, max_page_limit
from taskstate.api.routes_ui import install as install_ui
from taskstate.store import StateStore

BASE_PATH = "/taskstate"


def create_app(
    store: StateStore, auth: Auth, *, hosting: Hosting | None = None, state_routes: bool = True
) -> FastAPI:
    """The app. `state_routes=False`: the caller serves `routes_state.StateRoutes` in front of
    it (`taskstate serve`, to skip the layers below for the hot routes)."""
    app = FastAPI(
        title="taskstate",
        version=taskstate.__version__,
        summary="Task and asset state over REST, wire-compatible with Airflow 3.3's routes.",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    ctx = AppContext(store, auth, hosting or Hosting(), max_page_limit())
    app.state.taskstate = ctx
    errors.install(app)
    app.add_middleware(BodyLimit, limit=ctx.body_limit)
    app.add_middleware(routes_metrics.RequestMetrics, metrics=store.metrics)
    if state_routes:  # outermost (added last); `taskstate serve` puts it before the mount
        app.add_middleware(routes_state.StateRoutes, ctx=ctx)
    app.include_router(routes_discovery.router)
    if store.metrics.prometheus is not None:  # `taskstate serve`: GET /taskstate/metrics
        app.include_router(routes_metrics.router)
    install_ui(app)  # the state pages at /ui/ (issue 14), clients of the routes above

    @app.get(
        "/health",
        response_model=models.Health,
        tags=["Health"],
        responses={503: {"model": models.Health, "description": "The store cannot serve"}},
    )
    async def health(request: Request) -> Response:
        """Readiness: 200 when one indexed read of the store succeeds, else 503. The backend
        and version are shown to admins only (and on an open loopback server)."""
        body: dict[str, Any] = {"status": "ok"}
        code = 200
        try:
            await routes_state.call_store(ctx, store.probe)
        except Exception as exc:  # any failure of the store means "not ready"
            errors.log.warning("health: the state store is not ready: %s", exc)
            failed = f"the state store failed ({type(exc).__name__})"
            body = {"status": "unavailable", "detail": failed}
            code = 503
        if await _is_admin(ctx, request):
            body["backend"] = store.describe()
            body["version"] = taskstate.__version__
        headers = {"Cache-Control": "no-store"}
        if code == 503:
            headers["Retry-After"] = "1"
        return Response(errors.dumps(body), code, headers, media_type="application/json")

    @app.get("/health/live", response_model=models.Health, tags=["Health"])
    async def live() -> Response:
        """Liveness: the process answers; the store is not touched."""
        return Response(b'{"status":"ok"}', media_type="application/json")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            routes_state.document(schema, by_id=ctx.hosting.asset_by_id is not None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _is_admin(ctx: AppContext, request: Request) -> bool:
    """An admin caller; anyone else (or a refused token) is anonymous here."""
    try:
        return (await ctx.auth(request)).admin
    except HTTPException:
        return False


class BodyLimit:
    """413 for a body over `limit` bytes, by Content-Length or while it streams in."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, refusing it with 413 once its body is known to exceed the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await self._refuse(send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:  # FastAPI turns an HTTPException here into its response
                    raise HTTPException(413, self._detail)
            return message

        await self.app(scope, limited, send)

    @property
    def _detail(self) -> str:
        return f"the request body is over {self.limit} bytes"

    async def _refuse(self, send: Send) -> None:
        await _send_json(send, 413, json.dumps({"detail": self._detail}).encode())


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RefuseControlCharacters:
    """422 for a path holding a control character once decoded (`%0A`): no dag id, run id,
    task id or key may hold one, and route patterns (`.*`) would not match it, so without
    this the request would fall through to a plain-text 404."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 422 for an HTTP path with a control character; pass anything else on."""
        if scope["type"] == "http" and _CONTROL.search(scope["path"]):
            body = json.dumps(
                {
                    "detail": [
                        {
                            "loc": ["path"],
                            "msg": "a path must not contain control characters; a key, "
                            "dag id, run id or task id cannot hold one",
                            "type": "value_error",
                        }
                    ]
                }
            ).encode()
            await _send_json(send, 422, body)
            return
        await self.app(scope, receive, send)


async def _send_json(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
