"""The UI's routes on the API app: the page, its static files, and `access` (may I write?).
The page's files are package data of `taskstate.ui` (`static/`), read, never imported.

Every URL the page uses is relative to it (`../api/v2/...`), so a host that mounts the app
under a sub-path (`[api] base_url`, `SCRIPT_NAME`) needs no configuration.
"""

from __future__ import annotations

import html
from importlib.resources import files
from typing import Annotated
from urllib.parse import unquote, urlencode

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from taskstate.api.auth import Method
from taskstate.api.context import INT64, Caller, Ctx
from taskstate.scope import AssetScope

router = APIRouter(prefix="/ui", include_in_schema=False)
STATIC = files("taskstate.ui") / "static"


def install(app: FastAPI) -> None:
    """Add the state page's routes and its static files to `app`."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(packages=[("taskstate.ui", "static")]), name="ui-static")


def app_container(*, api: str, ui: str, login: str = "", csrf: str = "", view: str = "") -> str:
    """The element the script fills in; hosts that render their own page (the Airflow 2 view)
    embed this too. `api` / `ui`: URLs of the API (`.../api/v2/`) and of this router
    (`.../ui/`), relative to the page or absolute; `view="assets"`: open on the asset list."""
    attrs = {
        "data-api": api, "data-ui": ui, "data-login": login, "data-csrf": csrf, "data-view": view
    }  # fmt: skip
    rendered = " ".join(f'{name}="{html.escape(value)}"' for name, value in attrs.items())
    return f'<div id="ts-app" {rendered}><p>Loading…</p></div>'


@router.get("")
def redirect_to_page() -> RedirectResponse:
    """Redirect to the state page (`ui/`)."""
    # Relative, so the redirect keeps whatever prefix the host mounted the app under.
    return RedirectResponse("ui/", status_code=307)


@router.get("/", response_class=HTMLResponse)
def page(ctx: Ctx) -> HTMLResponse:
    """The state page: the HTML that loads the task and asset state browser."""
    template = (STATIC / "index.html").read_text(encoding="utf-8")
    container = app_container(api="../api/v2/", ui="./", login=ctx.hosting.login_url)
    return HTMLResponse(
        template.replace("<!--ts-app-->", container),
        headers={
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            # Framed only by its own origin (Airflow's "Task State" tab): no clickjacking.
            "X-Frame-Options": "SAMEORIGIN",
            "Content-Security-Policy": "frame-ancestors 'self'",
        },
    )


@router.get("/ti/{rest:path}")
def task_instance(request: Request) -> RedirectResponse:
    """`ti/{dag_id}/{run_id}/{task_id}/{map_index}`, the address Airflow 3's "Task State" tab
    fills in, to the page's own address. Read from the raw path: Airflow 3.2 percent-encodes
    each id, 3.1 inserts them as they are (`+`, `:` and `~` are fine in a path segment; Airflow's
    run ids hold no `/`). A map index Airflow left unfilled (`{MAP_INDEX}`, on a task that is
    not mapped) is -1."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = raw.decode("latin-1").split("/ui/ti/", 1)[-1].split("/")
    if len(parts) != 4:
        raise HTTPException(404, "expected ti/{dag_id}/{run_id}/{task_id}/{map_index}")
    dag_id, run_id, task_id, index = (unquote(part) for part in parts)
    query = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    query["map_index"] = index if index.lstrip("-").isdigit() else "-1"
    # Relative: up from .../ui/ti/<parts>/ to .../ui/, whatever the host's prefix.
    return RedirectResponse("../" * len(parts) + "?" + urlencode(query), status_code=307)


@router.api_route("/access", methods=["GET", "PUT", "DELETE"])
def access(
    request: Request,
    principal: Caller,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: Annotated[str, Query(pattern=r"^(-1|\d{1,19}|all)$")] = "-1",
    asset: str | None = None,
    asset_uri: str | None = None,
) -> dict[str, object]:
    """Whether the caller may do this request's method on a task instance (or, with
    `map_index=all`, every map index), on anything of a DAG (or of one of its runs: no
    `task_id`) or on an asset: the page hides what it may not do. Asked with the method
    itself, because Airflow 2's permissions are read per request method. The API's routes
    still decide every write; this only shapes the page."""
    method: Method = "GET" if request.method == "GET" else request.method  # type: ignore[assignment]
    index = None if map_index == "all" else int(map_index)
    if index is not None and index not in INT64:  # what the state routes refuse too
        raise RequestValidationError([{
            "loc": ("query", "map_index"), "type": "value_error",
            "msg": f"map_index must be -1, an integer up to {INT64.stop - 1} or all, "
            f"got {map_index!r}",
        }])  # fmt: skip
    if asset is not None or asset_uri is not None:
        allowed = principal.may_asset(AssetScope(name=asset, uri=asset_uri), method)
    elif dag_id is not None and run_id is not None and task_id is not None:
        allowed = principal.may_task(dag_id, run_id, task_id, index, method)
    elif dag_id is not None and task_id is None:
        allowed = principal.may_dag(dag_id, run_id, method)
    else:
        allowed = False
    return {"subject": principal.subject, "method": method, "allowed": allowed}
