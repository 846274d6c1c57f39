"""Asset state routes. taskstate has no asset ids of its own, so an asset is addressed by query:
`/assets/state-store?name=N` (or `uri=U` for an asset declared without a name; given both, the
name decides, as in `AssetScope`). Inside Airflow the host also serves Airflow 3.3's id form,
`/assets/{asset_id}/state-store`, with the same handlers.
"""

# No `from __future__ import annotations`: the handlers are defined inside `_router` and their
# `Depends(scope(...))` annotations name its argument, which FastAPI can only see evaluated.
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Response, status

from taskstate.api import models
from taskstate.api.auth import Method, require_asset
from taskstate.api.context import (
    Caller,
    Ctx,
    Limit,
    Offset,
    api_writer,
    entry_response,
    page_response,
    put_response,
    unprocessable,
)
from taskstate.errors import InvalidScopeError
from taskstate.scope import AssetScope
from taskstate.wire import asset_entry

ScopeFactory = Callable[[Method], Callable[..., AssetScope]]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Not found"}}


def _by_query(method: Method) -> Callable[..., AssetScope]:
    def dependency(
        principal: Caller, name: str | None = None, uri: str | None = None
    ) -> AssetScope:
        if name is None and uri is None:
            unprocessable(
                ("query", "name"),
                "say which asset: name=<name>, or uri=<uri> for an asset declared without a name",
            )
        try:
            scope = AssetScope(name=name, uri=uri)
        except InvalidScopeError as exc:
            unprocessable(("query", "name" if name is not None else "uri"), str(exc))
        require_asset(principal, scope, method)
        return scope

    return dependency


def _by_id(method: Method) -> Callable[..., AssetScope]:
    def dependency(asset_id: int, principal: Caller, ctx: Ctx) -> AssetScope:
        resolve = ctx.hosting.asset_by_id
        scope = None if resolve is None else resolve(asset_id)
        if scope is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"Asset with id {asset_id!r} not found")
        require_asset(principal, scope, method)
        return scope

    return dependency


def _router(prefix: str, scope: ScopeFactory) -> APIRouter:
    router = APIRouter(prefix=prefix, tags=["Asset State Store"])

    @router.get("", response_model=models.AssetStateCollection)
    def list_asset_state(
        asset: Annotated[AssetScope, Depends(scope("GET"))],
        ctx: Ctx,
        limit: Limit = 50,
        offset: Offset = 0,
        key_prefix: str = "",
    ) -> Response:
        """Keys of one asset, ascending."""
        accessor = ctx.store.asset_state(asset)
        return page_response(
            accessor, ctx, "asset_state_store", asset_entry, limit, offset, key_prefix
        )

    @router.get(
        "/{key:path}",
        response_model=models.AssetStateEntry,
        responses={**_NOT_FOUND, 304: {"description": "Not modified (If-None-Match)"}},
    )
    def get_asset_state(
        asset: Annotated[AssetScope, Depends(scope("GET"))],
        key: str,
        ctx: Ctx,
        if_none_match: Annotated[str | None, Header()] = None,
    ) -> Response:
        """One key, with its `ETag`; 404 when absent."""
        missing = f"Asset state store key {key!r} not found"
        return entry_response(
            ctx.store.asset_state(asset), key, asset_entry, if_none_match, missing
        )

    @router.put(
        "/{key:path}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        responses={**_NOT_FOUND, 412: {"description": "If-Match / If-None-Match failed"}},
    )
    def set_asset_state(
        asset: Annotated[AssetScope, Depends(scope("PUT"))],
        key: str,
        body: models.AssetStateBody,
        principal: Caller,
        ctx: Ctx,
        if_match: Annotated[str | None, Header()] = None,
        if_none_match: Annotated[str | None, Header()] = None,
        x_taskstate_write_id: Annotated[str | None, Header()] = None,
    ) -> Response:
        """Create or overwrite a key (conditional with `If-Match` / `If-None-Match: *`)."""
        writer = api_writer(principal, x_taskstate_write_id)
        accessor = ctx.store.asset_state(asset, writer=writer)
        return put_response(accessor, key, body.value, if_match, if_none_match)

    @router.delete(
        "/{key:path}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        responses=_NOT_FOUND,
    )
    def delete_asset_state(
        asset: Annotated[AssetScope, Depends(scope("DELETE"))], key: str, ctx: Ctx
    ) -> Response:
        """Remove a key; a no-op when it is absent."""
        ctx.store.asset_state(asset).delete(key)
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.delete(
        "", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=_NOT_FOUND
    )
    def clear_asset_state(
        asset: Annotated[AssetScope, Depends(scope("DELETE"))], ctx: Ctx
    ) -> Response:
        """Remove every key of the asset."""
        ctx.store.asset_state(asset).clear()
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router


by_query = _router("/api/v2/assets/state-store", _by_query)
by_id = _router("/api/v2/assets/{asset_id}/state-store", _by_id)
