"""Routes and checks the HTTP backend's workers need beyond Airflow 3.3's public routes.

- taskstate's own per-task-instance markers (`StateStore.meta`: the re-run and re-expansion
  markers the Airflow injection keeps beside a task's state), so a worker without database
  access detects a cleared re-run as a local one does: `GET|PUT …/taskstate-meta/{key}`,
  `DELETE …/taskstate-meta`. Authorised exactly as the task's own state.
- Fencing (`fence`, a dependency of the task-state write routes): inside Airflow, a write made
  with a task-instance token is refused (409) unless that task instance is running its try.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict

from taskstate.api.auth import require_task
from taskstate.api.context import Caller, Ctx, json_response
from taskstate.errors import KeyNotFoundError
from taskstate.scope import TaskScope

router = APIRouter(
    prefix="/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/taskstate-meta",
    tags=["taskstate internals"],
    include_in_schema=False,
)
MapIndex = Annotated[int, Query(ge=-1)]


class MetaBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any


def _scope(method: str) -> Any:
    def dependency(
        dag_id: str, dag_run_id: str, task_id: str, principal: Caller, map_index: MapIndex = -1
    ) -> TaskScope:
        require_task(principal, dag_id, dag_run_id, task_id, map_index, method)  # type: ignore[arg-type]
        return TaskScope(dag_id, dag_run_id, task_id, map_index)

    return dependency


@router.get("/{key:path}")
def get_marker(scope: Annotated[TaskScope, Depends(_scope("GET"))], key: str, ctx: Ctx) -> Response:
    value = ctx.store.meta(scope).get(key)
    if value is None:
        raise KeyNotFoundError(f"no marker {key!r}")  # typed: "no such key", not "no route"
    return json_response({"key": key, "value": value, "expires_at": None})


@router.put("/{key:path}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def set_marker(
    scope: Annotated[TaskScope, Depends(_scope("PUT"))], key: str, body: MetaBody, ctx: Ctx
) -> Response:
    ctx.store.meta(scope).set(key, body.value)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def clear_markers(scope: Annotated[TaskScope, Depends(_scope("DELETE"))], ctx: Ctx) -> Response:
    ctx.store.meta(scope).clear()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def fence(request: Request, principal: Caller, ctx: Ctx) -> None:
    """Refuse a task-state write from a try that is not the running one (409).

    Applies to task-instance tokens (they carry a try number) where the host can read task
    instances (`Hosting.running_try`); people, admin and pool tokens are not fenced.
    """
    running_try = ctx.hosting.running_try
    claims = getattr(principal, "claims", None)
    try_number = getattr(claims, "try_number", None)
    if request.method in ("GET", "HEAD") or running_try is None or try_number is None:
        return
    params = request.path_params
    try:
        map_index = int(request.query_params.get("map_index", "-1"))
    except ValueError:
        return  # the route's own validation answers 422
    running = running_try(params["dag_id"], params["dag_run_id"], params["task_id"], map_index)
    if running != try_number:
        now = "is not running" if running is None else f"is running try {running}"
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"stale try: this token is for try {try_number} of the task instance, which {now}; "
            "a newer try owns its state, so this write was refused",
        )
