"""Discovery for the UI and scripts: which DAGs, runs, task instances and assets hold state.

Each listing shows only what the caller may read, and is paged like the state listings; the
store answers with indexed queries (`taskstate.discovery`). Key counts stop past 10,000
(`keys` 10001 reads "10000+"). A DAG (or run) the caller may read nothing of is 403, as on
Airflow's own DAG routes, rather than an empty page that would read "holds no state".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from taskstate.api import models
from taskstate.api.auth import Principal, TokenPrincipal, require_dag
from taskstate.api.context import Caller, Ctx, Limit, Offset, json_response, page_bounds
from taskstate.api.routes_state import listing_ids
from taskstate.discovery import EVERYTHING, MayTask, Reach
from taskstate.scope import AssetScope

router = APIRouter(prefix="/api/v2", tags=["Discovery"])


def _reach(principal: Principal) -> Reach:
    """What the database can narrow for this caller: a token's globs and pins."""
    if isinstance(principal, TokenPrincipal) and not principal.claims.admin:
        c = principal.claims
        return Reach(c.dag_ids, c.run_id, c.task_id, c.map_index)
    return EVERYTHING


def _may_task(principal: Principal) -> MayTask:
    return lambda dag, run, task, index: principal.may_task(dag, run, task, index, "GET")


def _may_asset(principal: Principal) -> Callable[[AssetScope], bool]:
    return lambda asset: principal.may_asset(asset, "GET")


DagIdPattern = Annotated[
    str | None,
    Query(
        max_length=1000,
        description="Only DAG ids containing it, any case, as Airflow's `dag_id_pattern`: "
        "SQL LIKE wildcards `%` and `_` (escape with `\\`), `|` between alternatives.",
    ),
]


@router.get("/dags", response_model=models.DagCollection)
def list_dags(
    ctx: Ctx,
    principal: Caller,
    limit: Limit = 50,
    offset: Offset = 0,
    dag_id_pattern: DagIdPattern = None,
) -> Response:
    """DAG ids with task state, and their live key counts."""
    limit, offset = page_bounds(ctx, limit, offset)
    page = ctx.store.discovery().dags(
        reach=_reach(principal),
        may_task=_may_task(principal),
        limit=limit,
        offset=offset,
        pattern=dag_id_pattern or "",
    )
    dags = [{"dag_id": dag_id, "keys": keys} for dag_id, keys in page.items]
    return json_response({"dags": dags, "total_entries": page.total, "exact_total": page.exact})


@router.get("/dags/{dag_id}/dagRuns", response_model=models.DagRunCollection)
def list_dag_runs(
    dag_id: str,
    request: Request,
    ctx: Ctx,
    principal: Caller,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Response:
    """Run ids of one DAG with task state."""
    (dag_id,) = listing_ids(request, dag_id)  # after authentication: 401 before 422
    require_dag(principal, dag_id, None, "GET")
    limit, offset = page_bounds(ctx, limit, offset)
    page = ctx.store.discovery().runs(
        dag_id, reach=_reach(principal), may_task=_may_task(principal), limit=limit, offset=offset
    )
    runs = [{"dag_run_id": run_id, "keys": keys} for run_id, keys in page.items]
    return json_response({"dag_runs": runs, "total_entries": page.total, "exact_total": page.exact})


@router.get(
    "/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances",
    response_model=models.TaskInstanceCollection,
)
def list_task_instances(
    dag_id: str,
    dag_run_id: str,
    request: Request,
    ctx: Ctx,
    principal: Caller,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Response:
    """Task ids and map indices of one run with task state."""
    dag_id, dag_run_id = listing_ids(request, dag_id, dag_run_id)
    require_dag(principal, dag_id, dag_run_id, "GET")
    limit, offset = page_bounds(ctx, limit, offset)
    page = ctx.store.discovery().task_instances(
        dag_id,
        dag_run_id,
        reach=_reach(principal),
        may_task=_may_task(principal),
        limit=limit,
        offset=offset,
    )
    items = [{"task_id": t, "map_index": i, "keys": keys} for t, i, keys in page.items]
    return json_response(
        {"task_instances": items, "total_entries": page.total, "exact_total": page.exact}
    )


@router.get("/assets", response_model=models.AssetCollection)
def list_assets(ctx: Ctx, principal: Caller, limit: Limit = 50, offset: Offset = 0) -> Response:
    """Assets with state (by identity: the name, else the uri)."""
    limit, offset = page_bounds(ctx, limit, offset)
    page = ctx.store.discovery().assets(may_asset=_may_asset(principal), limit=limit, offset=offset)
    assets = [{"name": name, "keys": keys} for name, keys in page.items]
    return json_response({"assets": assets, "total_entries": page.total, "exact_total": page.exact})
