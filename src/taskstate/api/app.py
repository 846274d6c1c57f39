"""`create_app(store, auth)`: the one FastAPI app, whatever hosts it.

Routes are relative to the base path `/taskstate`: `taskstate serve` mounts the app there,
Airflow 3's api-server mounts it there through the plugin's `fastapi_apps`, and Airflow 2's
webserver dispatches `/taskstate/...` to it. One route table either way.
"""

from __future__ import annotations

import json
import re

from fastapi import Depends, FastAPI, HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import taskstate
from taskstate.api import (
    errors,
    models,
    routes_asset,
    routes_discovery,
    routes_metrics,
    routes_task,
    routes_worker,
)
from taskstate.api.auth import Auth
from taskstate.api.context import AppContext, Hosting, max_page_limit
from taskstate.store import StateStore
from taskstate.ui.pages import install as install_ui

BASE_PATH = "/taskstate"


def create_app(store: StateStore, auth: Auth, *, hosting: Hosting | None = None) -> FastAPI:
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
    app.include_router(routes_task.router, dependencies=[Depends(routes_worker.fence)])
    app.include_router(routes_worker.router)
    app.include_router(routes_asset.by_query)
    if ctx.hosting.asset_by_id is not None:
        app.include_router(routes_asset.by_id)
    app.include_router(routes_discovery.router)
    if store.metrics.prometheus is not None:  # `taskstate serve`: GET /taskstate/metrics
        app.include_router(routes_metrics.router)
    install_ui(app)  # the state pages at /ui/ (issue 14), clients of the routes above

    @app.get("/health", response_model=models.Health, tags=["Health"])
    def health() -> models.Health:
        """Liveness, and which backend serves the state (never its credentials)."""
        return models.Health(status="ok", backend=store.describe(), version=taskstate.__version__)

    return app


class BodyLimit:
    """413 for a body over `limit` bytes, by Content-Length or while it streams in."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
