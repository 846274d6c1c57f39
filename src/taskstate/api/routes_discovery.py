"""Discovery for the UI and scripts: which DAGs, runs, task instances and assets hold state.

Each listing shows only what the caller may read, and is paged like the state listings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import TypeVar

from fastapi import APIRouter, Response

from taskstate.api import models
from taskstate.api.context import Caller, Ctx, Limit, Offset, json_response, page_bounds
from taskstate.scope import ASSET_PREFIX, AssetScope, TaskScope, task_prefix

router = APIRouter(prefix="/api/v2", tags=["Discovery"])
K = TypeVar("K", bound=Hashable)


def _page(
    counts: Iterable[tuple[K, int]], limit: int, offset: int
) -> tuple[list[tuple[K, int]], int]:
    rows = sorted(counts, key=lambda row: row[0])  # type: ignore[arg-type, return-value]
    return rows[offset : offset + limit], len(rows)


def _readable_tasks(ctx: Ctx, principal: Caller, prefix: str) -> Iterable[tuple[TaskScope, int]]:
    for scope, keys in ctx.store.scopes(prefix):
        if isinstance(scope, TaskScope) and principal.may_task(
            scope.dag_id, scope.run_id, scope.task_id, scope.map_index, "GET"
        ):
            yield scope, keys


@router.get("/dags", response_model=models.DagCollection)
def list_dags(ctx: Ctx, principal: Caller, limit: Limit = 50, offset: Offset = 0) -> Response:
    """DAG ids with task state, and their live key counts."""
    limit, offset = page_bounds(ctx, limit, offset)
    counts: Counter[str] = Counter()
    for scope, keys in _readable_tasks(ctx, principal, ""):
        counts[scope.dag_id] += keys
    rows, total = _page(counts.items(), limit, offset)
    dags = [{"dag_id": dag_id, "keys": keys} for dag_id, keys in rows]
    return json_response({"dags": dags, "total_entries": total})


@router.get("/dags/{dag_id}/dagRuns", response_model=models.DagRunCollection)
def list_dag_runs(
    dag_id: str, ctx: Ctx, principal: Caller, limit: Limit = 50, offset: Offset = 0
) -> Response:
    """Run ids of one DAG with task state."""
    limit, offset = page_bounds(ctx, limit, offset)
    counts: Counter[str] = Counter()
    for scope, keys in _readable_tasks(ctx, principal, task_prefix(dag_id)):
        counts[scope.run_id] += keys
    rows, total = _page(counts.items(), limit, offset)
    runs = [{"dag_run_id": run_id, "keys": keys} for run_id, keys in rows]
    return json_response({"dag_runs": runs, "total_entries": total})


@router.get(
    "/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances",
    response_model=models.TaskInstanceCollection,
)
def list_task_instances(
    dag_id: str,
    dag_run_id: str,
    ctx: Ctx,
    principal: Caller,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Response:
    """Task ids and map indices of one run with task state."""
    limit, offset = page_bounds(ctx, limit, offset)
    found = _readable_tasks(ctx, principal, task_prefix(dag_id, dag_run_id))
    rows, total = _page((((s.task_id, s.map_index), k) for s, k in found), limit, offset)
    items = [{"task_id": t, "map_index": i, "keys": keys} for (t, i), keys in rows]
    return json_response({"task_instances": items, "total_entries": total})


@router.get("/assets", response_model=models.AssetCollection)
def list_assets(ctx: Ctx, principal: Caller, limit: Limit = 50, offset: Offset = 0) -> Response:
    """Assets with state (by identity: the name, else the uri)."""
    limit, offset = page_bounds(ctx, limit, offset)
    found = (
        (scope.identity, keys)
        for scope, keys in ctx.store.scopes(ASSET_PREFIX)
        if isinstance(scope, AssetScope) and principal.may_asset(scope, "GET")
    )
    rows, total = _page(found, limit, offset)
    assets = [{"name": name, "keys": keys} for name, keys in rows]
    return json_response({"assets": assets, "total_entries": total})
