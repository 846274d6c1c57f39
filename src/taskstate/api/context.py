"""What every route shares: the app's context, the caller, paging, entries on the wire, ETags."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response

from taskstate.api.auth import Auth, Principal
from taskstate.api.errors import dumps
from taskstate.scope import AssetScope
from taskstate.settings import setting
from taskstate.store import StateStore

DEFAULT_PAGE_LIMIT = 50


@dataclass(frozen=True)
class Hosting:
    """What a host (Airflow's plugin) adds; standalone there is nothing to add.

    `task_instance_exists(dag_id, run_id, task_id, map_index)` (map_index None: any index)
    makes writes to a task instance that does not exist 404, as in Airflow 3.3.
    `asset_by_id(asset_id)` serves Airflow's `/assets/{asset_id}/state-store` routes.
    `running_try(dag_id, run_id, task_id, map_index)` (the running try's number, else None)
    fences the writes made with task-instance tokens (`taskstate.api.routes_state`).
    `login_url`, relative to the state page, is where the page sends a user to sign in (empty:
    no sign-in page, as standalone, where callers bring tokens).
    """

    task_instance_exists: Callable[[str, str, str, int | None], bool] | None = None
    asset_by_id: Callable[[int], AssetScope | None] | None = None
    running_try: Callable[[str, str, str, int], int | None] | None = None
    login_url: str = ""


@dataclass
class AppContext:
    """What the routes share, kept on `app.state.taskstate`: the store, the auth dependency,
    what the host adds and the page-size cap."""

    store: StateStore
    auth: Auth
    hosting: Hosting = field(default_factory=Hosting)
    max_page_limit: int = 100  # Airflow's [api] maximum_page_limit

    inline: bool = field(init=False)
    """Store calls run in the event loop: a local SQLite file without offloading answers in
    tens of microseconds, less than a hop to a worker thread costs."""

    accessors: dict[Any, Any] = field(init=False, default_factory=dict)
    """Recent accessors by (scope, writer) (`routes_state`)."""

    def __post_init__(self) -> None:
        from taskstate.backends.sqlite import SQLiteBackend

        backend, offloads = self.store.backend, self.store.worker_backend is not None
        self.inline = isinstance(backend, SQLiteBackend) and not offloads

    @property
    def body_limit(self) -> int:
        """Largest request body: the value limit plus room for JSON framing."""
        limit = self.store.settings.max_value_storage_bytes
        return 16 * 1024 * 1024 if limit <= 0 else limit + 64 * 1024


def max_page_limit() -> int:
    """Airflow's `[api] maximum_page_limit` (`Settings.max_page_limit`)."""
    limit: int = setting("max_page_limit")
    return limit


async def context(request: Request) -> AppContext:
    """The FastAPI dependency giving a route the app's `AppContext`."""
    # async: no I/O here, and a sync dependency would cost a thread-pool hop per request
    ctx: AppContext = request.app.state.taskstate
    return ctx


async def caller(request: Request) -> Principal:
    """The FastAPI dependency giving a route its authenticated caller (401 when there is none)."""
    ctx: AppContext = request.app.state.taskstate
    return await ctx.auth(request)


Ctx = Annotated[AppContext, Depends(context)]
Caller = Annotated[Principal, Depends(caller)]
# The integers a request may name (ids, map indices, offsets): what the metadata database's
# integer columns and SQLite hold. A bigger one never reaches a query (it fails there: a 500).
INT64 = range(-(2**63), 2**63)
Limit = Annotated[int, Query(ge=0, description="At most `[api] maximum_page_limit` (100).")]
Offset = Annotated[int, Query(ge=0, le=INT64.stop - 1)]


def page_bounds(ctx: AppContext, limit: int, offset: int) -> tuple[int, int]:
    """Airflow clamps `limit` to its maximum rather than refusing it; so do we."""
    return min(limit, ctx.max_page_limit), offset


def json_response(
    body: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """JSON out without a second validation pass (bodies are built from the store's rows)."""
    return Response(dumps(body), status_code, headers, media_type="application/json")
