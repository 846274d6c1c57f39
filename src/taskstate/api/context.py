"""What every route shares: the app's context, the caller, paging, entries on the wire, ETags."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn

from fastapi import Depends, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError

from taskstate.accessors import _Accessor
from taskstate.api.auth import Auth, Principal
from taskstate.errors import KeyNotFoundError
from taskstate.scope import AssetScope
from taskstate.settings import airflow_option
from taskstate.store import StateStore, StoredEntry
from taskstate.wire import quoted

DEFAULT_PAGE_LIMIT = 50


@dataclass(frozen=True)
class Hosting:
    """What a host (Airflow's plugin) adds; standalone there is nothing to add.

    `task_instance_exists(dag_id, run_id, task_id, map_index)` (map_index None: any index)
    makes writes to a task instance that does not exist 404, as in Airflow 3.3.
    `asset_by_id(asset_id)` serves Airflow's `/assets/{asset_id}/state-store` routes.
    `running_try(dag_id, run_id, task_id, map_index)` (the running try's number, else None)
    fences task-state writes made with task-instance tokens (`taskstate.api.routes_worker`).
    """

    task_instance_exists: Callable[[str, str, str, int | None], bool] | None = None
    asset_by_id: Callable[[int], AssetScope | None] | None = None
    running_try: Callable[[str, str, str, int], int | None] | None = None


@dataclass
class AppContext:
    store: StateStore
    auth: Auth
    hosting: Hosting = field(default_factory=Hosting)
    max_page_limit: int = 100  # Airflow's [api] maximum_page_limit

    @property
    def body_limit(self) -> int:
        """Largest request body: the value limit plus room for JSON framing."""
        limit = self.store.settings.max_value_storage_bytes
        return 16 * 1024 * 1024 if limit <= 0 else limit + 64 * 1024


def max_page_limit() -> int:
    raw = airflow_option("api", "maximum_page_limit")
    try:
        return max(1, int(raw)) if raw else 100
    except ValueError:
        return 100


async def context(request: Request) -> AppContext:
    # async: no I/O here, and a sync dependency would cost a thread-pool hop per request
    ctx: AppContext = request.app.state.taskstate
    return ctx


async def caller(request: Request) -> Principal:
    ctx: AppContext = request.app.state.taskstate
    return await ctx.auth(request)


Ctx = Annotated[AppContext, Depends(context)]
Caller = Annotated[Principal, Depends(caller)]
Limit = Annotated[int, Query(ge=0, description="At most `[api] maximum_page_limit` (100).")]
Offset = Annotated[int, Query(ge=0)]


def page_bounds(ctx: AppContext, limit: int, offset: int) -> tuple[int, int]:
    """Airflow clamps `limit` to its maximum rather than refusing it; so do we."""
    return min(limit, ctx.max_page_limit), offset


def json_response(
    body: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """JSON out without a second validation pass (bodies are built from `StoredEntry`)."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return Response(text, status_code, headers, media_type="application/json")


def api_writer(principal: Principal, write_id: str | None = None) -> dict[str, Any]:
    """Who writes: the caller, and the client's id of this write when it sent one (a client
    whose response was lost reads the key back and finds its own write by it)."""
    writer: dict[str, Any] = {"kind": "api", "subject": principal.subject}
    if write_id:
        writer["write_id"] = write_id[:64]
    return writer


def _tags(header: str) -> list[str]:
    parts = (part.strip() for part in header.split(","))
    return [part.removeprefix("W/").strip('"') for part in parts if part]


def write_conditions(if_match: str | None, if_none_match: str | None) -> dict[str, Any]:
    """`If-Match: <etag>` / `If-Match: *` / `If-None-Match: *` → the store's write arguments."""
    out: dict[str, Any] = {}
    if if_match is not None:
        tags = _tags(if_match)
        if tags == ["*"]:
            out["must_exist"] = True
        elif len(tags) == 1:
            out["if_match"] = tags[0]
        else:
            unprocessable(("header", "if-match"), "If-Match takes one ETag (or *)")
    if if_none_match is not None:
        if _tags(if_none_match) != ["*"]:
            unprocessable(
                ("header", "if-none-match"), "a write takes only If-None-Match: * (create only)"
            )
        out["if_none_match"] = True
    return out


def not_modified(if_none_match: str | None, etag: str) -> bool:
    return if_none_match is not None and (
        etag in _tags(if_none_match) or _tags(if_none_match) == ["*"]
    )


Render = Callable[[StoredEntry], dict[str, Any]]


def page_response(
    accessor: _Accessor, ctx: AppContext, field: str, render: Render, limit: int, offset: int,
    key_prefix: str,
) -> Response:  # fmt: skip
    """A listing: one page of live keys, ascending, and the total."""
    limit, offset = page_bounds(ctx, limit, offset)
    page = accessor.page(limit=limit, offset=offset, key_prefix=key_prefix)
    return json_response({field: [render(e) for e in page.items], "total_entries": page.total})


def entry_response(
    accessor: _Accessor, key: str, render: Render, if_none_match: str | None, missing: str
) -> Response:
    """A GET of one key: its body with the `ETag`, 304 when the client's copy is current, 404
    (`missing`) when the key is absent or expired."""
    entry = accessor.entry(key)
    if entry is None:  # typed, so the client tells "no such key" from "no such route"
        raise KeyNotFoundError(missing)
    headers = {"ETag": quoted(entry.etag)}
    if not_modified(if_none_match, entry.etag):
        return Response(status_code=304, headers=headers)
    return json_response(render(entry), headers=headers)


def put_response(
    accessor: _Accessor, key: str, value: Any, if_match: str | None, if_none_match: str | None,
    **expiry: Any,
) -> Response:  # fmt: skip
    """A PUT: the write under its conditions, 204 with the new `ETag`; `If-Match: *` on an
    absent key is 412."""
    try:
        entry = accessor.write(key, value, **expiry, **write_conditions(if_match, if_none_match))
    except KeyNotFoundError:
        raise HTTPException(
            status.HTTP_412_PRECONDITION_FAILED, f"If-Match: * but key {key!r} is absent"
        ) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers={"ETag": quoted(entry.etag)})


def unprocessable(loc: tuple[str | int, ...], message: str) -> NoReturn:
    """Refuse the request with FastAPI's own 422 shape."""
    raise RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])
