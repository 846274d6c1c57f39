"""Task state routes: Airflow 3.3's `/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}
/state-store` paths, query parameters, bodies, status codes and response shapes.

Differences, on purpose: an expired key is absent; keys list `last_updated_by`; a GET returns an
`ETag` and a PUT honours `If-Match` / `If-None-Match: *`; `key_prefix` filters a listing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Response, status

from taskstate.api import models
from taskstate.api.auth import Method, require_task
from taskstate.api.context import (
    Caller,
    Ctx,
    Limit,
    Offset,
    api_writer,
    entry_response,
    json_response,
    page_response,
    put_response,
    unprocessable,
    write_conditions,
)
from taskstate.errors import KeyNotFoundError
from taskstate.scope import TaskScope
from taskstate.store import DEFAULT_EXPIRY, KEEP_EXPIRY
from taskstate.stored import Expiry
from taskstate.wire import quoted, task_entry

router = APIRouter(
    prefix="/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/state-store",
    tags=["Task State Store"],
)
MapIndex = Annotated[int, Query(ge=-1, description="-1 for a task that is not mapped.")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Not found"}}


def _check_instance(ctx: Ctx, dag_id: str, run_id: str, task_id: str, index: int | None) -> None:
    exists = ctx.hosting.task_instance_exists
    if exists is not None and not exists(dag_id, run_id, task_id, index):
        addressed = "all_map_indices=True" if index is None else f"map_index={index}"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"Task instance not found for dag_id={dag_id!r}, run_id={run_id!r}, "
            f"task_id={task_id!r}, {addressed}",
        )


def _scope(method: Method, *, existing: bool = False) -> Callable[..., TaskScope]:
    """Authorise first (401 before 403 before 404/422), then build the scope."""

    def dependency(
        dag_id: str,
        dag_run_id: str,
        task_id: str,
        principal: Caller,
        ctx: Ctx,
        map_index: MapIndex = -1,
    ) -> TaskScope:
        require_task(principal, dag_id, dag_run_id, task_id, map_index, method)
        scope = TaskScope(dag_id, dag_run_id, task_id, map_index)
        if existing:
            _check_instance(ctx, dag_id, dag_run_id, task_id, map_index)
        return scope

    return dependency


def _clear_scope(
    dag_id: str,
    dag_run_id: str,
    task_id: str,
    principal: Caller,
    ctx: Ctx,
    map_index: MapIndex = -1,
    all_map_indices: bool = False,
) -> TaskScope:
    index = None if all_map_indices else map_index
    require_task(principal, dag_id, dag_run_id, task_id, index, "DELETE")
    scope = TaskScope(dag_id, dag_run_id, task_id, map_index)
    _check_instance(ctx, dag_id, dag_run_id, task_id, index)
    return scope


def _missing(key: str) -> str:
    return f"Task state store key {key!r} not found"


@router.get("", response_model=models.TaskStateCollection)
def list_task_state(
    scope: Annotated[TaskScope, Depends(_scope("GET"))],
    ctx: Ctx,
    limit: Limit = 50,
    offset: Offset = 0,
    key_prefix: str = "",
) -> Response:
    """Live keys of one task instance, ascending; expired keys are absent."""
    accessor = ctx.store.task_state(scope)
    return page_response(accessor, ctx, "task_state_store", task_entry, limit, offset, key_prefix)


@router.get(
    "/{key:path}",
    response_model=models.TaskStateEntry,
    responses={**_NOT_FOUND, 304: {"description": "Not modified (If-None-Match)"}},
)
def get_task_state(
    scope: Annotated[TaskScope, Depends(_scope("GET"))],
    key: str,
    ctx: Ctx,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """One key, with its `ETag`; 404 when absent or expired."""
    accessor = ctx.store.task_state(scope)
    return entry_response(accessor, key, task_entry, if_none_match, _missing(key))


@router.put(
    "/{key:path}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={**_NOT_FOUND, 412: {"description": "If-Match / If-None-Match failed"}},
)
def set_task_state(
    scope: Annotated[TaskScope, Depends(_scope("PUT", existing=True))],
    key: str,
    body: models.TaskStateBody,
    principal: Caller,
    ctx: Ctx,
    if_match: Annotated[str | None, Header()] = None,
    if_none_match: Annotated[str | None, Header()] = None,
    x_taskstate_write_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Create or overwrite a key. `If-Match: <etag>` writes only over that version;
    `If-None-Match: *` creates only."""
    accessor = ctx.store.task_state(scope, writer=api_writer(principal, x_taskstate_write_id))
    return put_response(
        accessor, key, body.value, if_match, if_none_match, expires_at=_expiry(body, ctx)
    )


def _expiry(body: models.TaskStateBody, ctx: Ctx) -> float | Expiry | None:
    """`expires_in` counts from the server's clock; `expires_at` is an instant."""
    when = body.expires_at
    if body.expires_in is not None:
        if when != "default":
            unprocessable(("body", "expires_in"), "give expires_at or expires_in, not both")
        return ctx.store.clock() + body.expires_in
    return DEFAULT_EXPIRY if when == "default" else None if when is None else when.timestamp()


@router.patch("/{key:path}", response_model=None, responses=_NOT_FOUND)
def patch_task_state(
    scope: Annotated[TaskScope, Depends(_scope("PUT", existing=True))],
    key: str,
    body: models.PatchBody,
    principal: Caller,
    ctx: Ctx,
    if_match: Annotated[str | None, Header()] = None,
) -> Response:
    """Replace the value of an existing key, keeping its expiry (200, body `null`)."""
    conditions = write_conditions(if_match, None)
    conditions["must_exist"] = True
    accessor = ctx.store.task_state(scope, writer=api_writer(principal))
    try:
        entry = accessor.write(key, body.value, expires_at=KEEP_EXPIRY, **conditions)
    except KeyNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, _missing(key)) from None
    return json_response(None, headers={"ETag": quoted(entry.etag)})


@router.delete(
    "/{key:path}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_NOT_FOUND,
)
def delete_task_state(
    scope: Annotated[TaskScope, Depends(_scope("DELETE", existing=True))], key: str, ctx: Ctx
) -> Response:
    """Remove a key; a no-op when it is absent."""
    ctx.store.task_state(scope).delete(key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=_NOT_FOUND
)
def clear_task_state(
    scope: Annotated[TaskScope, Depends(_clear_scope)], ctx: Ctx, all_map_indices: bool = False
) -> Response:
    """Remove every key of the task instance; `all_map_indices=true`: of every map index."""
    ctx.store.task_state(scope).clear(all_map_indices=all_map_indices)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
