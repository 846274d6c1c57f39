"""The state routes, served straight from ASGI in front of the FastAPI app: Airflow 3.3's task
and asset state-store paths, and taskstate's per-task-instance markers.

    /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/state-store[/{key}]
    /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/taskstate-meta[/{key}]
    /api/v2/assets/state-store[/{key}]?name=N | ?uri=U
    /api/v2/assets/{asset_id}/state-store[/{key}]          (inside Airflow only)
    .../taskInstances/{task_id}/taskstate-history[/{key}]  (state history, docs/history.md)
    /api/v2/assets[/{asset_id}]/taskstate-history/{key}
    .../taskInstances/{task_id}/taskstate-update/{key}     (update operations, taskstate.ops)
    /api/v2/assets[/{asset_id}]/taskstate-update/{key}

Every request goes through one order (`_serve`): authenticate (401) -> read the address
(422) -> authorise (403) -> fence (409) -> existence (404) -> body (422/413) -> the store. The
path is read from the raw bytes the client sent, one segment per id: `%2F` inside an id stays
in that id, `.` and `..` are ids like any other, and a segment that is not UTF-8 once
percent-decoded is 422 (never folded into U+FFFD). The key is the rest of the path.

Why not FastAPI routes: its routing decodes the path before matching, and its request handling
(dependency resolution, a thread-pool hop per sync dependency) costs several times the SQLite
statement behind a request. The OpenAPI document still describes these routes
(`openapi_paths`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from time import perf_counter
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, quote, unquote, unquote_to_bytes

import anyio.to_thread
import pydantic
from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from taskstate import ops
from taskstate.api import errors, models
from taskstate.api.auth import Method, Principal, require_asset, require_task
from taskstate.api.context import INT64, AppContext
from taskstate.api.logs import AUDIT, audit
from taskstate.api.routes_metrics import record
from taskstate.errors import (
    InvalidScopeError,
    KeyNotFoundError,
    PreconditionFailedError,
    StaleTryError,
    TaskStateError,
)
from taskstate.scope import AssetScope, TaskScope
from taskstate.store import DEFAULT_EXPIRY, KEEP_EXPIRY
from taskstate.stored import GONE, etag_of, stored_ref
from taskstate.values import NEVER_EXPIRE
from taskstate.wire import (
    AS_OF,
    ASSET_ITEMS,
    ATOMIC_OPS,
    EXACT_TOTAL,
    EXPIRES_AT,
    EXPIRES_IN,
    MAX_WRITE_ID,
    OP_HEADER,
    TASK_ITEMS,
    TOTAL,
    VIA_HEADER,
    WRITE_ID,
    WRITE_ID_HEADER,
    WRITE_IDS_HEADER,
    WRITE_IDS_RECORDED,
    asset_entry,
    entry_json,
    iso,
    parse_instant,
    quoted,
    task_entry,
    version_json,
)
from taskstate.writers import api_writer, task_writer

T = TypeVar("T")

_TASK = "/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}"
# The latest instant an expiry may name: what a datetime (and so the API's JSON) can carry.
MAX_EXPIRES_AT = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()
# How each verb is authorised: a restore (POST) is a write, so a read-only token may not.
_METHODS: dict[str, Method] = {
    "GET": "GET", "PUT": "PUT", "PATCH": "PUT", "POST": "PUT", "DELETE": "DELETE"
}  # fmt: skip
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})
_INT = re.compile(r"-?[0-9]{1,19}")


class Address:
    """What a request names: its route, scope and key (None: the collection)."""

    __slots__ = ("all_map_indices", "key", "map_index", "method", "query", "route", "scope")

    def __init__(self, route: str, method: str, query: dict[str, str]) -> None:
        self.route = route  # "task", "meta", "asset", "task_history" or "asset_history"
        self.method = method
        self.query = query
        self.scope: TaskScope | AssetScope | None = None
        self.key: str | None = None
        self.map_index = -1
        self.all_map_indices = False


class StateRoutes:
    """ASGI middleware: serves the state routes, hands every other request to `app`. It sits
    outermost (`taskstate serve` puts it in front of the mount at `prefix`), so it enforces the
    body limit and times its requests itself (`routes_metrics.record`)."""

    def __init__(self, app: ASGIApp, ctx: AppContext, prefix: str = "") -> None:
        self.app = app
        self.ctx = ctx
        self.prefix = prefix.encode()
        # The client re-sends a conditional write whose answer it lost only to a server that
        # says it keeps the write ledger (an older one would apply it twice).
        recorded = (WRITE_IDS_HEADER.lower().encode(), WRITE_IDS_RECORDED.encode())
        self.advertised = [recorded] if ctx.store.backend.records_writes else []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a state route here (timed when metrics are on); pass any other request on."""
        if scope["type"] == "http":
            path = self._path(scope)
            match = _match(path, self.ctx.hosting.asset_by_id is not None)
            if match is None:
                scope = _with_listing_ids(scope, path)
            else:
                started = perf_counter()
                status_code, body, headers = await self._answer(scope, receive, match)
                await _send(send, status_code, body, headers + self.advertised)
                metrics = self.ctx.store.metrics
                if metrics.enabled:
                    # The route's name, as FastAPI's endpoints were named: never an id or key.
                    name = _NAMES.get((match[0], match[2] is not None, scope["method"]))
                    seconds = perf_counter() - started
                    record(metrics, name or "unmatched", scope["method"], status_code, seconds)
                return
        await self.app(scope, receive, send)

    def _path(self, scope: Scope) -> bytes | None:
        if not self.prefix:
            return _raw_path(scope)
        raw: bytes = scope.get("raw_path") or quote(scope["path"]).encode()
        if not raw.startswith(self.prefix):
            return None
        return raw[len(self.prefix) :]

    async def _answer(
        self, scope: Scope, receive: Receive, match: tuple[str, list[bytes], bytes | None]
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        try:
            return await _serve(self.ctx, scope, receive, *match)
        except HTTPException as exc:
            headers = [(k.encode(), v.encode()) for k, v in (exc.headers or {}).items()]
            return exc.status_code, errors.dumps({"detail": exc.detail}), headers
        except RequestValidationError as exc:
            return 422, errors.validation_body(exc), []
        except TaskStateError as exc:
            code, body, extra = errors.taskstate_error(exc)
            return code, body, [(k.encode(), v.encode()) for k, v in extra.items()]


# -- matching the raw path ------------------------------------------------------------------


def _raw_path(scope: Scope) -> bytes:
    """The path as the client sent it, below the app's mount point."""
    raw: bytes | None = scope.get("raw_path") or _wsgi_raw_path(scope)
    root = scope.get("root_path", "")
    if raw is None:  # a server that keeps no raw path
        return quote(scope["path"][len(root) :]).encode()
    raw = raw.split(b"?", 1)[0]
    if root:
        encoded = quote(root).encode()
        if raw.startswith(encoded):
            return raw[len(encoded) :]
        if not raw.startswith(root.encode()):
            return quote(scope["path"][len(root) :]).encode()
        return raw[len(root.encode()) :]
    return raw


def _wsgi_raw_path(scope: Scope) -> bytes | None:
    """Under a WSGI server (Airflow 2's webserver: gunicorn, through a2wsgi, which passes no
    `raw_path`), the request target as sent, from the environ's `RAW_URI` (gunicorn, werkzeug)
    or `REQUEST_URI`; None when there is none, or it is not the path the server decoded."""
    environ = scope.get("wsgi_environ")
    if not environ:
        return None
    uri = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if not isinstance(uri, str):
        return None
    if uri.startswith(("http://", "https://")):  # a request target in absolute form
        uri = "/" + uri.split("://", 1)[1].partition("/")[2]
    path = uri.split("?", 1)[0]
    try:
        raw = path.encode("latin-1")  # WSGI's str holds the bytes as latin-1
    except UnicodeEncodeError:
        return None
    # The same request's path (no rewrite between the server and here)?
    return raw if unquote_to_bytes(path).decode("utf-8", "replace") == scope["path"] else None


def _match(path: bytes | None, by_id: bool) -> tuple[str, list[bytes], bytes | None] | None:
    """(route, id segments, raw key or None) of a state route, else None (not ours)."""
    if path is None or not path.startswith(b"/api/v2/"):
        return None
    parts = path.split(b"/")[3:]  # after "", "api", "v2"
    n = len(parts)
    if n >= 7 and parts[0] == b"dags" and parts[2] == b"dagRuns" and parts[4] == b"taskInstances":
        kind = _TASK_ROUTES.get(parts[6])
        if kind is not None:
            key = b"/".join(parts[7:]) if n > 7 else None
            return kind, [parts[1], parts[3], parts[5]], key
        return None
    if n >= 2 and parts[0] == b"assets" and parts[1] in _ASSET_ROUTES:
        return _ASSET_ROUTES[parts[1]], [], b"/".join(parts[2:]) if n > 2 else None
    if by_id and n >= 3 and parts[0] == b"assets" and parts[2] in _ASSET_ROUTES:
        return _ASSET_ROUTES[parts[2]], [parts[1]], b"/".join(parts[3:]) if n > 3 else None
    return None


_TASK_ROUTES = {
    b"state-store": "task",
    b"taskstate-meta": "meta",
    b"taskstate-history": "task_history",
    b"taskstate-update": "task_update",
}
# An asset id is an integer, so `taskstate-history` can never be one.
_ASSET_ROUTES = {
    b"state-store": "asset",
    b"taskstate-history": "asset_history",
    b"taskstate-update": "asset_update",
}
_ASSET_KINDS = frozenset(_ASSET_ROUTES.values())
_UPDATE_KINDS = frozenset({"task_update", "asset_update"})
# The collection routes that may address every map index at once (`all_map_indices=true`).
_ALL_MAP_INDICES = frozenset(
    {("task", "DELETE"), ("task_history", "POST"), ("task_history", "GET")}
)


# The discovery listings under a dag or run id are FastAPI routes: their ids are read from the
# raw path here too (`listing_ids`), so `%2F` stays inside an id and `%FF` is 422.
LISTING_IDS = "taskstate.listing_ids"
_LISTING_NAMES = ("dag_id", "dag_run_id")


def _with_listing_ids(scope: Scope, path: bytes | None) -> Scope:
    """`scope` with the raw id segments of a discovery listing (`/dags/{dag_id}/dagRuns`,
    `/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances`), and its path's tail as sent, so
    FastAPI matches one segment per id; any other scope unchanged."""
    if path is None or not path.startswith(b"/api/v2/dags/"):
        return scope
    parts = path.split(b"/")[3:]
    if len(parts) == 3 and parts[2] == b"dagRuns":
        ids = [parts[1]]
    elif len(parts) == 5 and parts[2] == b"dagRuns" and parts[4] == b"taskInstances":
        ids = [parts[1], parts[3]]
    else:
        return scope
    sent = path.decode("latin-1")
    decoded = unquote(sent, errors="replace")  # as the server decoded scope["path"]
    if not scope["path"].endswith(decoded):
        return scope
    return {**scope, LISTING_IDS: ids, "path": scope["path"][: -len(decoded)] + sent}


def listing_ids(request: Request, *decoded: str) -> tuple[str, ...]:
    """The ids of a discovery listing, strictly decoded from the raw path (422 for one that
    is not UTF-8); `decoded` (FastAPI's) where the server keeps no raw path."""
    raw: list[bytes] | None = request.scope.get(LISTING_IDS)
    if raw is None:
        return decoded
    return tuple(_text(part, name) for part, name in zip(raw, _LISTING_NAMES, strict=False))


def _unprocessable(loc: tuple[str | int, ...], message: str) -> NoReturn:
    raise RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])


def _text(raw: bytes, name: str) -> str:
    """One percent-decoded path part, strictly UTF-8."""
    try:
        return (unquote_to_bytes(raw) if b"%" in raw else raw).decode("utf-8")
    except UnicodeDecodeError:
        _unprocessable(
            ("path", name), f"the {name} is not valid UTF-8 once percent-decoded; encode "
            "each character as UTF-8 before percent-encoding it"
        )  # fmt: skip


def _query(scope: Scope) -> dict[str, str]:
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    try:
        return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True, errors="strict"))
    except UnicodeDecodeError:
        _unprocessable(("query",), "a query parameter is not valid UTF-8 once percent-decoded")


def _int(query: dict[str, str], name: str, default: int, minimum: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if _INT.fullmatch(raw.strip()) is None or int(raw) < minimum or int(raw) not in INT64:
        _unprocessable(("query", name), f"{name} must be an integer >= {minimum}, got {raw[:40]!r}")
    return int(raw)


def _bool(query: dict[str, str], name: str) -> bool:
    raw = query.get(name, "false").lower()
    if raw not in _TRUE and raw not in _FALSE:
        _unprocessable(("query", name), f"{name} must be true or false, got {raw[:40]!r}")
    return raw in _TRUE


# -- the one order ----------------------------------------------------------------------------


async def _serve(
    ctx: AppContext,
    scope: Scope,
    receive: Receive,
    route: str,
    ids: list[bytes],
    raw_key: bytes | None,
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    request = Request(scope, receive)
    verb = scope["method"]
    allowed = _ALLOWED.get((route, raw_key is not None))
    if allowed is None:  # an asset's history has no collection route
        return 404, errors.dumps({"detail": "Not Found"}), []
    if verb not in allowed:
        headers = [(b"allow", ", ".join(sorted(allowed)).encode())]
        return 405, errors.dumps({"detail": "Method Not Allowed"}), headers
    method = _METHODS[verb]
    # 1. authenticate
    principal = await ctx.auth(request)
    # 2. the address, then authorise
    query = _query(scope)
    address = Address(route, verb, query)
    address.key = None if raw_key is None else _text(raw_key, "key")
    if route in _ASSET_KINDS:
        asset = await _asset(ctx, ids, query)
        require_asset(principal, asset, method)
        address.scope = asset
    else:
        dag_id, run_id, task_id = (_text(raw, n) for raw, n in zip(ids, _ID_NAMES, strict=True))
        address.map_index = _int(query, "map_index", -1, -1)
        index: int | None = address.map_index
        if raw_key is None and (route, verb) in _ALL_MAP_INDICES:
            address.all_map_indices = _bool(query, "all_map_indices")
            index = None if address.all_map_indices else address.map_index
        require_task(principal, dag_id, run_id, task_id, index, method)
        try:
            address.scope = _task_scope(dag_id, run_id, task_id, address.map_index)
        except InvalidScopeError as exc:
            _unprocessable(("path",), str(exc))
    if method != "GET":
        # 3. fence: a stale try's token writes nothing (task state, asset state, markers)
        await _fence(ctx, principal)
        # 4. existence: a write to a task instance the host does not know is 404 (its state
        # and its markers alike)
        if route not in _ASSET_KINDS and ctx.hosting.task_instance_exists is not None:
            scope_ = address.scope
            assert isinstance(scope_, TaskScope)
            index = None if address.all_map_indices else scope_.map_index
            await _check_instance(ctx, scope_.dag_id, scope_.run_id, scope_.task_id, index)
    # 5. the body (read by the handler) and the store
    answer = await _HANDLERS[route, raw_key is not None, verb](ctx, request, principal, address)
    if method != "GET" and answer[0] < 300:
        _audit(verb, principal, request, address)
    return answer


def _audit(verb: str, principal: Principal, request: Request, address: Address) -> None:
    """The write's audit line (`taskstate serve --log-format`); never its value."""
    if not AUDIT.isEnabledFor(logging.INFO):
        return
    if verb == "PUT" or verb == "PATCH":
        action = "set" if verb == "PUT" else "patch"
    elif address.route in _UPDATE_KINDS:
        action = "update"
    elif verb == "POST":
        action = "restore" if address.key is not None else "restore-task"
    elif address.key is not None:
        action = "delete"
    else:
        action = "clear-all-map-indices" if address.all_map_indices else "clear"
    audit(action, _writer(principal, request), address.scope, address.key)


_ID_NAMES = ("dag_id", "dag_run_id", "task_id")


async def _asset(ctx: AppContext, ids: list[bytes], query: dict[str, str]) -> AssetScope:
    if ids:  # Airflow's /assets/{asset_id}/state-store
        raw = _text(ids[0], "asset_id")
        if re.fullmatch(r"-?[0-9]+", raw) is None:
            _unprocessable(("path", "asset_id"), f"asset_id must be an integer, got {raw[:40]!r}")
        if _INT.fullmatch(raw) is None or int(raw) not in INT64:
            # past the 64-bit range: no asset has that id, and the database is not asked
            raise KeyNotFoundError(f"Asset with id {raw[:40]} not found")
        resolve = ctx.hosting.asset_by_id
        assert resolve is not None  # matched only when the host resolves ids
        found = await anyio.to_thread.run_sync(resolve, int(raw))
        if found is None:
            raise KeyNotFoundError(f"Asset with id {int(raw)} not found")  # typed, as below
        return found
    name, uri = query.get("name"), query.get("uri")
    if name is None and uri is None:
        _unprocessable(
            ("query", "name"),
            "say which asset: name=<name>, or uri=<uri> for an asset declared without a name",
        )
    try:
        return AssetScope(name=name, uri=uri)
    except InvalidScopeError as exc:
        _unprocessable(("query", "name" if name is not None else "uri"), str(exc))


async def _fence(ctx: AppContext, principal: Principal) -> None:
    """Refuse a write made with a task-instance token unless that task instance is running
    the token's try (409): task state, asset state and markers alike. People, admin and pool
    tokens are not fenced; nor is anything where the host cannot read task instances."""
    running_try = ctx.hosting.running_try
    instance = principal.task_instance
    if running_try is None or instance is None or principal.try_number is None:
        return
    running = await anyio.to_thread.run_sync(running_try, *instance)
    if running != principal.try_number:
        now = "is not running" if running is None else f"is running try {running}"
        raise StaleTryError(  # 409
            f"stale try: this token is for try {principal.try_number} of the task instance, "
            f"which {now}; a newer try owns its state, so this write was refused"
        )


async def _check_instance(
    ctx: AppContext, dag_id: str, run_id: str, task_id: str, index: int | None
) -> None:
    exists = ctx.hosting.task_instance_exists
    assert exists is not None
    if not await anyio.to_thread.run_sync(exists, dag_id, run_id, task_id, index):
        addressed = "all_map_indices=True" if index is None else f"map_index={index}"
        raise KeyNotFoundError(  # typed (as Airflow 3.3's 404), not "no such route"
            f"Task instance not found for dag_id={dag_id!r}, run_id={run_id!r}, "
            f"task_id={task_id!r}, {addressed}"
        )


async def _body(ctx: AppContext, request: Request, model: type[pydantic.BaseModel]) -> Any:
    """5. the body, read only now (413 over the limit), parsed and validated as FastAPI would
    (`json.loads`, so a lone surrogate reaches the value rules), in its 422 shape."""
    limit = ctx.body_limit
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise HTTPException(413, f"the request body is over {limit} bytes")
    chunks, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise HTTPException(413, f"the request body is over {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        _invalid([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        _invalid([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                   "input": {}, "ctx": {"error": exc.msg}}])  # fmt: skip
    except (RecursionError, UnicodeDecodeError):
        raise HTTPException(400, "There was an error parsing the body") from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        _invalid([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)])


def _invalid(errors_: list[dict[str, Any]]) -> NoReturn:
    raise RequestValidationError(errors_)


async def call_store(ctx: AppContext, fn: Callable[..., T], *args: Any) -> T:
    """A store call: in the event loop for local SQLite (tens of microseconds, less than a
    thread hop), in a worker thread for a store over the network."""
    if ctx.inline:
        return fn(*args)
    return await anyio.to_thread.run_sync(fn, *args)


# -- handlers ---------------------------------------------------------------------------------

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
Handler = Callable[[AppContext, Request, Principal, Address], Awaitable[Answer]]
_NO_CONTENT: Answer = (204, b"", [])


def _json(body: Any, etag: str | None = None) -> Answer:
    headers = [(b"content-type", b"application/json")]
    if etag is not None:
        headers.append((b"etag", quoted(etag).encode()))
    return 200, errors.dumps(body), headers


def _tags(header: str) -> list[str]:
    parts = (part.strip() for part in header.split(","))
    return [part.removeprefix("W/").strip('"') for part in parts if part]


def _conditions(request: Request, *, put: bool) -> dict[str, Any]:
    """`If-Match: <etag>` / `If-Match: *` / `If-None-Match: *` -> the store's arguments."""
    out: dict[str, Any] = {}
    if_match = request.headers.get("if-match")
    if if_match is not None:
        tags = _tags(if_match)
        if tags == ["*"]:
            out["must_exist"] = True
        elif len(tags) == 1:
            out["if_match"] = tags[0]
        else:
            _unprocessable(("header", "if-match"), "If-Match takes one ETag (or *)")
    if_none_match = request.headers.get("if-none-match")
    if put and if_none_match is not None:
        if _tags(if_none_match) != ["*"]:
            _unprocessable(
                ("header", "if-none-match"), "a write takes only If-None-Match: * (create only)"
            )
        out["if_none_match"] = True
    return out


def _writer(principal: Principal, request: Request) -> dict[str, Any]:
    """Who writes: the caller, and the client's id of this write when it sent one (a client
    whose answer was lost reads the key back and finds its own write by it)."""
    instance = principal.task_instance  # a task-instance token writes as that task
    writer: dict[str, Any] = (
        api_writer(principal.subject, request.headers.get(VIA_HEADER))
        if instance is None
        else task_writer(TaskScope(*instance), principal.try_number)
    )
    write_id = _write_id(request)
    if write_id:
        writer[WRITE_ID] = write_id
    return writer


def _write_id(request: Request) -> str | None:
    """The client's id of this write (`X-Taskstate-Write-Id`), at most `MAX_WRITE_ID` long."""
    write_id = request.headers.get(WRITE_ID_HEADER)
    if write_id and len(write_id) > MAX_WRITE_ID:
        _unprocessable(
            ("header", WRITE_ID_HEADER.lower()),
            f"a write id is at most {MAX_WRITE_ID} characters (a UUID's 32 hex digits fit)",
        )
    return write_id or None


def _task_scope(dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskScope:
    """A validated scope; the recent ones are kept (a worker addresses one task instance over
    and over, and a scope is immutable)."""
    key = (dag_id, run_id, task_id, map_index)
    found = _SCOPES.get(key)
    if found is None:
        found = TaskScope(dag_id, run_id, task_id, map_index)
        if len(_SCOPES) >= _KEPT:
            _SCOPES.clear()
        _SCOPES[key] = found
    return found


def _accessor(ctx: AppContext, address: Address, writer: dict[str, Any] | None = None) -> Any:
    """The scope's accessor, writing as `writer`. An accessor holds only the store, the scope
    and the writer, so the recent ones are kept and reused (not one with a write id: each
    write has its own)."""
    scope = address.scope
    assert scope is not None
    if writer is not None and WRITE_ID in writer:
        return _new_accessor(ctx, scope, writer)
    key = (scope, None if writer is None else tuple(writer.items()))
    found = ctx.accessors.get(key)
    if found is None:
        if len(ctx.accessors) >= _KEPT:
            ctx.accessors.clear()
        found = ctx.accessors[key] = _new_accessor(ctx, scope, writer)
    return found


def _new_accessor(
    ctx: AppContext, scope: TaskScope | AssetScope, writer: dict[str, Any] | None
) -> Any:
    if isinstance(scope, TaskScope):
        return ctx.store.task_state(scope, writer=writer)
    return ctx.store.asset_state(scope, writer=writer)


_KEPT = 1024
_SCOPES: dict[tuple[str, str, str, int], TaskScope] = {}


def _missing(address: Address) -> str:
    kind = "Asset" if address.route in _ASSET_KINDS else "Task"
    return f"{kind} state store key {address.key!r} not found"


async def _get(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """One key with its `ETag`; 304 when the client's copy is current; 404 when absent. An
    inline value is answered from the stored JSON text, never decoded (`wire.entry_json`)."""
    row = await call_store(ctx, _accessor(ctx, a).live_row, a.key)
    if row is None:  # typed: the client tells "no such key" from "no such route"
        raise KeyNotFoundError(_missing(a))
    etag = etag_of(row.value, row.expires_at, row.updated_by, row.updated_at)
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        tags = _tags(if_none_match)
        if etag in tags or tags == ["*"]:
            return 304, b"", [(b"etag", quoted(etag).encode())]
    if stored_ref(row.value) is None:
        body = entry_json(row, expiry=a.route == "task")
        return 200, body, [(b"content-type", b"application/json"), (b"etag", quoted(etag).encode())]
    entry = await call_store(ctx, ctx.store.entry_of, row)  # offloaded: read its object
    if entry is None:  # deleted while being read
        raise KeyNotFoundError(_missing(a))
    render = task_entry if a.route == "task" else asset_entry
    return _json(render(entry), entry.etag)


async def _list(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """One page of live keys, ascending, and the total."""
    limit = min(_int(a.query, "limit", 50, 0), ctx.max_page_limit)  # clamped, as Airflow does
    offset = _int(a.query, "offset", 0, 0)
    prefix = a.query.get("key_prefix", "")
    exact = _bool(a.query, "exact_total")
    accessor = _accessor(ctx, a)
    body = await call_store(
        ctx, lambda: _listing(ctx, accessor, a.route == "task", limit, offset, prefix, exact)
    )
    return 200, body, [(b"content-type", b"application/json")]


def _listing(
    ctx: AppContext, accessor: Any, task: bool, limit: int, offset: int, prefix: str, exact: bool
) -> bytes:
    """A listing's body, built from the rows as stored: an inline value goes in as its JSON
    text (`wire.entry_json`, as a GET answers), so a row costs no decode, no re-encode and no
    ETag (a listing's items carry none); only an offloaded value is read and decoded."""
    page = accessor.row_page(limit=limit, offset=offset, key_prefix=prefix, exact_total=exact)
    render = task_entry if task else asset_entry
    items = []
    for row in page.items:
        if stored_ref(row.value) is None:
            items.append(entry_json(row, expiry=task))
        elif (entry := ctx.store.entry_of(row)) is not None:  # None: deleted while being read
            items.append(errors.dumps(render(entry)))
    collection = (TASK_ITEMS if task else ASSET_ITEMS).encode()
    total = errors.dumps({TOTAL: page.total, EXACT_TOTAL: page.exact})  # '{"total_entries":...}'
    return b'{"%s":[%s],%s' % (collection, b",".join(items), total[1:])


def _expiry(ctx: AppContext, body: models.TaskStateBody) -> Any:
    """A PUT's expiry -> the store's. `expires_in` counts from the server's clock (what the
    Python client sends); `expires_at` is an instant, refused (422) when already past or later
    than 9999-12-31T23:59:59Z (the API could not write it back)."""
    when, now = body.expires_at, ctx.store.clock()
    if body.expires_in is not None:
        return _expires_in(ctx, body.expires_in, when)
    if when == "default":
        return DEFAULT_EXPIRY
    if when is None:
        return None
    assert isinstance(when, datetime)
    epoch = when.timestamp()
    if epoch > MAX_EXPIRES_AT:
        _unprocessable(("body", EXPIRES_AT), "expires_at is after 9999-12-31T23:59:59Z")
    if epoch <= now:
        _unprocessable(
            ("body", EXPIRES_AT),
            "expires_at is not in the future (by the server's clock); to remove a key, DELETE it",
        )
    return epoch


def _expires_in(ctx: AppContext, seconds: float, expires_at: object) -> float:
    """The instant `expires_in` names, by the server's clock; 422 when `expires_at` is given
    too, or when it reaches past 9999-12-31T23:59:59Z."""
    if expires_at != "default":
        _unprocessable(("body", EXPIRES_IN), "give expires_at or expires_in, not both")
    at = ctx.store.clock() + seconds
    if at > MAX_EXPIRES_AT:
        _unprocessable(("body", EXPIRES_IN), "expires_in reaches past 9999-12-31T23:59:59Z")
    return at


async def _put(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Create or overwrite; conditional with `If-Match` / `If-None-Match: *`; 204 + ETag."""
    conditions = _conditions(request, put=True)
    if a.route == "task":
        body = await _body(ctx, request, models.TaskStateBody)
        conditions["expires_at"] = _expiry(ctx, body)
    else:
        body = await _body(ctx, request, models.AssetStateBody)
    accessor = _accessor(ctx, a, _writer(principal, request))
    op = request.headers.get(OP_HEADER)  # what the version records: a client's update is a PUT
    conditions["op"] = op if op in ATOMIC_OPS else "set"
    conditions["write_id"] = _write_id(request)  # re-sent: answered with the first outcome
    try:
        entry = await call_store(ctx, lambda: accessor.write(a.key, body.value, **conditions))
    except KeyNotFoundError:
        raise PreconditionFailedError(f"If-Match: * but key {a.key!r} is absent") from None
    return 204, b"", [(b"etag", quoted(entry.etag).encode())]


async def _patch(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Replace the value of an existing key, keeping its expiry (200, body `null`)."""
    conditions = _conditions(request, put=False)
    conditions["must_exist"] = True
    conditions["write_id"] = _write_id(request)
    body = await _body(ctx, request, models.PatchBody)
    accessor = _accessor(ctx, a, _writer(principal, request))
    try:
        entry = await call_store(
            ctx, lambda: accessor.write(a.key, body.value, expires_at=KEEP_EXPIRY, **conditions)
        )
    except KeyNotFoundError:
        raise KeyNotFoundError(_missing(a)) from None
    return _json(None, entry.etag)


async def _delete(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Remove a key (a no-op when absent); with `If-Match`, only that version (else 412)."""
    conditions = _conditions(request, put=False)
    accessor = _accessor(ctx, a, _writer(principal, request))  # history records who
    if not conditions:
        await call_store(ctx, accessor.delete, a.key)
        return _NO_CONTENT
    if_match, write_id = conditions.get("if_match"), _write_id(request)
    deleted = await call_store(ctx, lambda: accessor.delete_if(a.key, if_match, write_id=write_id))
    if not deleted:
        raise PreconditionFailedError(
            f"key {a.key!r} changed or is absent since it was read (If-Match no longer holds)"
        )
    return _NO_CONTENT


async def _clear(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Remove every key; a task's clear removes its markers too (`all_map_indices`: of every
    map index)."""
    accessor = _accessor(ctx, a, _writer(principal, request))  # history records who
    if isinstance(a.scope, TaskScope):
        scope, every = a.scope, a.all_map_indices

        def clear() -> None:
            accessor.clear(all_map_indices=every)
            ctx.store.meta(scope).clear(all_map_indices=every)

        await call_store(ctx, clear)
    else:
        await call_store(ctx, accessor.clear)
    return _NO_CONTENT


async def _update(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Apply an update operation (`taskstate.ops`) to the key in one transaction, as the
    store's `update`: the new value. With a write id, a re-sent copy applies nothing and
    answers the first one's new value (without `value` when that is no longer kept)."""
    task = a.route == "task_update"
    body = await _body(ctx, request, models.TaskUpdateBody if task else models.AssetUpdateBody)
    op = ops.from_wire(body.op, body.value)
    retention = _retention(ctx, body) if isinstance(body, models.TaskUpdateBody) else None
    accessor = _accessor(ctx, a, _writer(principal, request))
    key, default, write_id = a.key, body.default, _write_id(request)
    value = await call_store(ctx, lambda: accessor.apply(key, op, default, retention, write_id))
    return _json({"key": key} if value is GONE else {"key": key, "value": value})


def _retention(ctx: AppContext, body: models.TaskUpdateBody) -> timedelta | None:
    """An update's expiry -> the accessor's retention: `expires_in` seconds from the server's
    clock, `expires_at: null` never, neither the default."""
    if body.expires_in is not None:
        _expires_in(ctx, body.expires_in, body.expires_at)
        return timedelta(seconds=body.expires_in)
    return None if body.expires_at == "default" else NEVER_EXPIRE


_ABSENT = object()


async def _history(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """A key's kept versions, newest first (`?limit=`); with `?as_of=`, the value it held then
    (404 when none, 410 when the version that covered it is no longer kept)."""
    accessor = _accessor(ctx, a)
    key = a.key
    assert key is not None
    raw = a.query.get(AS_OF)
    if raw is not None:
        when = parse_instant(raw)
        value = await call_store(ctx, lambda: accessor.get(key, _ABSENT, as_of=when))
        if value is _ABSENT:  # typed: "held no value then", not "no such route"
            raise KeyNotFoundError(f"{_missing(a)} at {iso(when.timestamp())}")
        return _json({"key": key, "value": value, AS_OF: iso(when.timestamp())})
    limit = _int(a.query, "limit", -1, 0)
    versions = await call_store(ctx, lambda: accessor.history(key, None if limit < 0 else limit))
    return _json({"versions": [version_json(v) for v in versions]})


async def _restore(ctx: AppContext, request: Request, principal: Principal, a: Address) -> Answer:
    """Write a kept version back as a new one (a deletion's version deletes the key); with
    `If-Match`, only over that ETag (412 otherwise, as an edit). The new version, and the key's
    new `ETag` when it is live."""
    conditions = _conditions(request, put=False)
    body = await _body(ctx, request, models.RestoreBody)
    accessor = _accessor(ctx, a, _writer(principal, request))
    key = a.key
    assert key is not None

    def restore() -> tuple[Any, Any]:
        if_match = conditions.get("if_match")
        if conditions.get("must_exist"):  # If-Match: * -> over whatever is there now
            current = accessor.entry(key)
            if current is None:
                raise PreconditionFailedError(f"If-Match: * but key {key!r} is absent")
            if_match = current.etag
        version = accessor.restore(key, body.version, if_match=if_match)
        return version, accessor.entry(key)

    version, entry = await call_store(ctx, restore)
    return _json(version_json(version), None if entry is None else entry.etag)


async def _restore_task(
    ctx: AppContext, request: Request, principal: Principal, a: Address
) -> Answer:
    """Every key of the task instance (`all_map_indices`: of every map index) back as it was at
    the body's `as_of`, in one transaction; keys created since are deleted."""
    scope = a.scope
    assert isinstance(scope, TaskScope)
    body = await _body(ctx, request, models.RestoreTaskBody)
    writer = _writer(principal, request)
    index = None if a.all_map_indices else scope.map_index
    count = await call_store(
        ctx,
        lambda: ctx.store.restore_task(
            scope.dag_id, scope.run_id, scope.task_id, as_of=body.as_of, map_index=index,
            writer=writer,
        ),
    )  # fmt: skip
    return _json({"restored": count})


async def _restore_preview(
    ctx: AppContext, request: Request, principal: Principal, a: Address
) -> Answer:
    """What `_restore_task` with `?as_of=` would change (`restore_task_preview`), writing
    nothing: a read, so a read-only token may ask."""
    scope = a.scope
    assert isinstance(scope, TaskScope)
    raw = a.query.get(AS_OF)
    if raw is None:
        _unprocessable(("query", AS_OF), "as_of is required: the instant to restore, with offset")
    when = parse_instant(raw)
    index = None if a.all_map_indices else scope.map_index
    changes = await call_store(
        ctx,
        lambda: ctx.store.restore_task_preview(
            scope.dag_id, scope.run_id, scope.task_id, as_of=when, map_index=index
        ),
    )
    return _json({
        AS_OF: iso(when.timestamp()),
        "restored": sum(1 for c in changes if c.then is not None),
        "changes": [c._asdict() for c in changes],
    })  # fmt: skip


class MetaBody(models._Body):
    """PUT on a task instance's marker: its value (extra fields refused)."""

    value: Any


async def _get_marker(
    ctx: AppContext, request: Request, principal: Principal, a: Address
) -> Answer:
    assert isinstance(a.scope, TaskScope)
    value = await call_store(ctx, ctx.store.meta(a.scope).get, a.key)
    if value is None:  # typed: "no such key", not "no such route"
        raise KeyNotFoundError(f"no marker {a.key!r}")
    return _json({"key": a.key, "value": value, "expires_at": None})


async def _put_marker(
    ctx: AppContext, request: Request, principal: Principal, a: Address
) -> Answer:
    assert isinstance(a.scope, TaskScope) and a.key is not None
    body = await _body(ctx, request, MetaBody)
    key, value = a.key, body.value
    await call_store(ctx, lambda: ctx.store.meta(a.scope).set(key, value))  # type: ignore[arg-type]
    return _NO_CONTENT


async def _clear_markers(
    ctx: AppContext, request: Request, principal: Principal, a: Address
) -> Answer:
    assert isinstance(a.scope, TaskScope)
    await call_store(ctx, ctx.store.meta(a.scope).clear)
    return _NO_CONTENT


_HANDLERS: dict[tuple[str, bool, str], Handler] = {
    ("task", False, "GET"): _list,
    ("task", False, "DELETE"): _clear,
    ("task", True, "GET"): _get,
    ("task", True, "PUT"): _put,
    ("task", True, "PATCH"): _patch,
    ("task", True, "DELETE"): _delete,
    ("asset", False, "GET"): _list,
    ("asset", False, "DELETE"): _clear,
    ("asset", True, "GET"): _get,
    ("asset", True, "PUT"): _put,
    ("asset", True, "DELETE"): _delete,
    ("meta", False, "DELETE"): _clear_markers,
    ("meta", True, "GET"): _get_marker,
    ("meta", True, "PUT"): _put_marker,
    ("task_history", False, "GET"): _restore_preview,
    ("task_history", False, "POST"): _restore_task,
    ("task_history", True, "GET"): _history,
    ("task_history", True, "POST"): _restore,
    ("asset_history", True, "GET"): _history,
    ("asset_history", True, "POST"): _restore,
    ("task_update", True, "POST"): _update,
    ("asset_update", True, "POST"): _update,
}
# Each route's name in metrics (`RequestMetrics`): few tags, never an id or a key.
_NAMES: dict[tuple[str, bool, str], str] = {
    ("task", False, "GET"): "list_task_state",
    ("task", False, "DELETE"): "clear_task_state",
    ("task", True, "GET"): "get_task_state",
    ("task", True, "PUT"): "set_task_state",
    ("task", True, "PATCH"): "patch_task_state",
    ("task", True, "DELETE"): "delete_task_state",
    ("asset", False, "GET"): "list_asset_state",
    ("asset", False, "DELETE"): "clear_asset_state",
    ("asset", True, "GET"): "get_asset_state",
    ("asset", True, "PUT"): "set_asset_state",
    ("asset", True, "DELETE"): "delete_asset_state",
    ("meta", False, "DELETE"): "clear_markers",
    ("meta", True, "GET"): "get_marker",
    ("meta", True, "PUT"): "set_marker",
    ("task_history", False, "GET"): "preview_restore_task_state",
    ("task_history", False, "POST"): "restore_task_state",
    ("task_history", True, "GET"): "task_state_history",
    ("task_history", True, "POST"): "restore_task_key",
    ("asset_history", True, "GET"): "asset_state_history",
    ("asset_history", True, "POST"): "restore_asset_key",
    ("task_update", True, "POST"): "update_task_state",
    ("asset_update", True, "POST"): "update_asset_state",
}
_ALLOWED: dict[tuple[str, bool], frozenset[str]] = {}
for _route, _keyed, _verb in _HANDLERS:
    _ALLOWED[_route, _keyed] = _ALLOWED.get((_route, _keyed), frozenset()) | {_verb}


async def _send(
    send: Send, status_code: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    # A new list: answers such as `_NO_CONTENT` are shared, and must not grow a header per use.
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    if body and not any(name == b"content-type" for name, _ in headers):
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# -- the OpenAPI document ---------------------------------------------------------------------

_REF = "#/components/schemas/{model}"


def _schema(components: dict[str, Any], model: type[pydantic.BaseModel]) -> dict[str, str]:
    """`model`'s schema among the components; a reference to it."""
    found = model.model_json_schema(ref_template=_REF)
    for name, definition in found.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault(model.__name__, found)
    return {"$ref": _REF.format(model=model.__name__)}


def _param(name: str, where: str, schema: dict[str, Any], doc: str = "") -> dict[str, Any]:
    out = {"name": name, "in": where, "required": where == "path", "schema": schema}
    return {**out, "description": doc} if doc else out


def _operation(
    tag: str, summary: str, params: list[dict[str, Any]], responses: dict[str, Any],
    body: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    errors_ = {"401": "Not authenticated", "403": "Forbidden", "409": "Stale try (a task "
               "token of a try that is not running)", "422": "Validation error",
               "503": "The store failed; retry"}  # fmt: skip
    out: dict[str, Any] = {
        "tags": [tag],
        "summary": summary,
        "operationId": summary.lower().replace(" ", "_").replace("-", "_").replace(",", ""),
        "parameters": params,
        "responses": {**responses, **{k: {"description": v} for k, v in errors_.items()}},
    }
    if body is not None:
        content = {"application/json": {"schema": body}}
        out["requestBody"] = {"required": True, "content": content}
    return out


def document(schema: dict[str, Any], *, by_id: bool) -> None:
    """Add the state routes (served by `StateRoutes`, not FastAPI) to the OpenAPI document."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    text, integer = {"type": "string"}, {"type": "integer"}
    key = _param("key", "path", text, "The key; the rest of the path (it may hold `/`).")
    map_index = _param("map_index", "query", {**integer, "minimum": -1, "default": -1},
                       "-1 for a task that is not mapped.")  # fmt: skip
    if_match = _param("If-Match", "header", text, "Only over this ETag (or `*`: if present).")
    if_none = _param("If-None-Match", "header", text)
    page = [
        _param("limit", "query", {**integer, "minimum": 0, "default": 50},
               "At most `[api] maximum_page_limit` (100)."),
        _param("offset", "query", {**integer, "minimum": 0, "default": 0}),
        _param("key_prefix", "query", {**text, "default": ""}),
        _param("exact_total", "query", {"type": "boolean", "default": False},
               "Count every match for `total_entries` (O(keys)); without it the page costs "
               "O(offset + limit) and `total_entries` is exact only when the keys end on it."),
    ]  # fmt: skip
    ok = {"204": {"description": "Done; the new `ETag` in the header"}}
    gone = {"404": {"description": "Not found"}}
    failed = {"412": {"description": "If-Match / If-None-Match failed"}}

    def entry(model: type[pydantic.BaseModel]) -> dict[str, Any]:
        content = {"application/json": {"schema": _schema(components, model)}}
        return {"200": {"description": "Successful Response", "content": content}}

    task = [_param(n, "path", text) for n in _ID_NAMES] + [map_index]
    tag = "Task State Store"
    schema["paths"][_TASK + "/state-store"] = {
        "get": _operation(tag, "List task state", task + page,
                          entry(models.TaskStateCollection)),
        "delete": _operation(tag, "Clear task state", [*task, _param(
            "all_map_indices", "query", {"type": "boolean", "default": False})],
            {**ok, **gone}),
    }  # fmt: skip
    schema["paths"][_TASK + "/state-store/{key}"] = {
        "get": _operation(tag, "Get task state", [*task, key, if_none],
                          {**entry(models.TaskStateEntry), "304": {"description": "Not modified"},
                           **gone}),
        "put": _operation(tag, "Set task state", [*task, key, if_match, if_none],
                          {**ok, **gone, **failed}, _schema(components, models.TaskStateBody)),
        "patch": _operation(tag, "Patch task state", [*task, key, if_match],
                            {**entry(models.TaskStateEntry), **gone, **failed},
                            _schema(components, models.PatchBody)),
        "delete": _operation(tag, "Delete task state", [*task, key, if_match],
                             {**ok, **gone, **failed}),
    }  # fmt: skip
    updated = {
        **entry(models.UpdateResult),
        "412": {"description": "The write id was already used for another key"},
    }
    write_id = _param(WRITE_ID_HEADER, "header", {**text, "maxLength": MAX_WRITE_ID},
                      "The client's id of this update: a re-sent copy applies nothing and "
                      "answers the first one's new value.")  # fmt: skip
    schema["paths"][_TASK + "/taskstate-update/{key}"] = {
        "post": _operation(tag, "Update task state", [*task, key, write_id], updated,
                           _schema(components, models.TaskUpdateBody)),
    }  # fmt: skip
    history = _history_operations(components, key, if_match)
    tag = "State History"
    schema["paths"][_TASK + "/taskstate-history"] = {
        "get": _operation(tag, "Preview restoring task state as of", [*task, _param(
            "all_map_indices", "query", {"type": "boolean", "default": False}), _param(
            AS_OF, "query", {"type": "string", "format": "date-time"},
            "The instant to restore, with its offset.") | {"required": True}],
            {**entry(models.RestoreTaskPreview), "410": history["410"]}),
        "post": _operation(tag, "Restore task state as of", [*task, _param(
            "all_map_indices", "query", {"type": "boolean", "default": False})],
            {**entry(models.RestoreTaskResult), "410": history["410"]},
            _schema(components, models.RestoreTaskBody)),
    }  # fmt: skip
    schema["paths"][_TASK + "/taskstate-history/{key}"] = {
        "get": _operation(tag, "Task state history", task + history["get"], history["read"]),
        "post": _operation(tag, "Restore task state version", [*task, *history["post"]],
                           history["restored"], history["body"]),
    }  # fmt: skip
    tag = "Asset State Store"
    prefixes = {"/api/v2/assets/state-store": [
        _param("name", "query", text, "The asset's name."),
        _param("uri", "query", text, "The asset's uri, for an asset declared without a name."),
    ]}  # fmt: skip
    if by_id:
        prefixes["/api/v2/assets/{asset_id}/state-store"] = [_param("asset_id", "path", integer)]
    for prefix, asset in prefixes.items():
        by = " by id" if "{asset_id}" in prefix else ""
        schema["paths"][prefix] = {
            "get": _operation(tag, f"List asset state{by}", asset + page,
                              entry(models.AssetStateCollection)),
            "delete": _operation(tag, f"Clear asset state{by}", asset, ok),
        }  # fmt: skip
        base = prefix.replace("/state-store", "/taskstate-history")
        schema["paths"][base + "/{key}"] = {
            "get": _operation("State History", f"Asset state history{by}",
                              asset + history["get"], history["read"]),
            "post": _operation("State History", f"Restore asset state version{by}",
                               [*asset, *history["post"]], history["restored"], history["body"]),
        }  # fmt: skip
        schema["paths"][prefix.replace("/state-store", "/taskstate-update") + "/{key}"] = {
            "post": _operation(tag, f"Update asset state{by}", [*asset, key, write_id], updated,
                               _schema(components, models.AssetUpdateBody)),
        }  # fmt: skip
        schema["paths"][prefix + "/{key}"] = {
            "get": _operation(tag, f"Get asset state{by}", [*asset, key, if_none],
                              {**entry(models.AssetStateEntry), **gone}),
            "put": _operation(tag, f"Set asset state{by}", [*asset, key, if_match, if_none],
                              {**ok, **failed}, _schema(components, models.AssetStateBody)),
            "delete": _operation(tag, f"Delete asset state{by}", [*asset, key, if_match],
                                 {**ok, **failed}),
        }  # fmt: skip


def _history_operations(
    components: dict[str, Any], key: dict[str, Any], if_match: dict[str, Any]
) -> dict[str, Any]:
    """The parts of the history routes' operations that task and asset share."""

    def ok(model: type[pydantic.BaseModel], many: bool = False) -> dict[str, Any]:
        schema: dict[str, Any] = _schema(components, model)
        if many:
            schema = {"oneOf": [schema, _schema(components, models.ValueAsOf)]}
        content = {"application/json": {"schema": schema}}
        return {"description": "Successful Response", "content": content}

    gone = {"description": "The version that covered as_of is no longer kept, or history is off"}
    return {
        "get": [
            key,
            _param("limit", "query", {"type": "integer", "minimum": 0},
                   "At most this many versions (never more than taskstate_history_versions)."),
            _param(AS_OF, "query", {"type": "string", "format": "date-time"},
                   "The value the key held at this instant (with its offset) instead."),
        ],
        "read": {
            "200": ok(models.HistoryCollection, many=True),
            "404": {"description": "Not found (with as_of: the key held no value then)"},
            "410": gone,
        },
        "post": [key, if_match],
        "body": _schema(components, models.RestoreBody),
        "restored": {
            "200": ok(models.HistoryVersion),
            "404": {"description": "No such kept version"},
            "410": gone,
            "412": {"description": "If-Match failed"},
        },
        "410": gone,
    }  # fmt: skip
