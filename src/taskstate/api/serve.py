"""`taskstate serve`: the HTTP API under uvicorn, mounted at `/taskstate`.

With no `[state_store] taskstate_secret_key` the server is open (anyone who reaches it may read
and write all state), so it binds only to loopback then, and says so on start-up.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from taskstate.api.tokens import SigningKeys
    from taskstate.store import StateStore

_EXTRA_HINT = "the HTTP API needs the server extra: pip install 'taskstate[server]'"


def require_server_extra() -> None:
    """A clear message, not an ImportError, when FastAPI/uvicorn/PyJWT are not installed."""
    try:
        import fastapi  # noqa: F401
        import jwt  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{_EXTRA_HINT} ({exc})") from None


def is_loopback(host: str) -> bool:
    """Whether `host` is `localhost` or a loopback IP address; a host name is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def standalone_app(
    store: StateStore, keys: SigningKeys | None, *, access_log: bool = False
) -> ASGIApp:
    """The app at `/taskstate`, authenticated by taskstate tokens (open without a key);
    `access_log`: a `taskstate.access` line per request, this process's lines written behind
    the requests (`taskstate.api.logs`)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from taskstate.api.app import BASE_PATH, RefuseControlCharacters, create_app
    from taskstate.api.auth import Auth
    from taskstate.api.routes_state import StateRoutes

    app = create_app(store, Auth.standalone(keys), state_routes=False)
    mounted = Starlette(routes=[Mount(BASE_PATH, app)])
    # The state routes first: the hot path skips the mount and FastAPI's middleware stack.
    state = StateRoutes(mounted, app.state.taskstate, prefix=BASE_PATH)
    served: ASGIApp = RefuseControlCharacters(state)
    if keys is None:
        served = LoopbackHostOnly(served)
    if access_log:  # outermost: refusals (421, control characters) are logged too
        from taskstate.api.logs import AccessLog, write_behind

        served = AccessLog(served)
        write_behind()  # the access and audit lines, off the request path
    return served


class LoopbackHostOnly:
    """An open server answers only requests addressed to loopback by name (`Host`). A web
    page can point a name it controls at 127.0.0.1 (DNS rebinding) and then read and write
    through the browser: its requests carry that name, so they are refused (421)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer 421 for an HTTP or WebSocket request not addressed to loopback; pass the
        rest on."""
        if scope["type"] in ("http", "websocket") and not _loopback_host(scope):
            body = (
                b'{"detail":"this open taskstate server (no secret key) answers only requests '
                b'addressed to localhost, 127.0.0.1 or [::1]"}'
            )
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]  # fmt: skip
            await send({"type": "http.response.start", "status": 421, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _loopback_host(scope: Any) -> bool:
    host = next((v for k, v in scope["headers"] if k == b"host"), None)
    if host is None:
        return False
    name = host.decode("latin-1").strip().lower()
    if name.startswith("["):  # [::1]:port
        name = name[1 : name.find("]")] if "]" in name else name
    else:
        name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    return is_loopback(name) or name.endswith(".localhost")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--url", help="Store URL; default: the command's --url, else [state_store] settings.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="Each request's access line and each write's audit line (who, scope, key; never "
    "the value), and the server's own lines, as text or one JSON object per line.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes sharing the port (one per core); each has its own connections.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    url: str | None,
    log_level: str,
    log_format: str,
    workers: int,
) -> None:
    """Serve the state store over HTTP (Airflow 3.3's state-store routes under /taskstate)."""
    require_server_extra()
    import uvicorn

    from taskstate.api.logs import log_config
    from taskstate.api.tokens import SigningKeys
    from taskstate.metrics import configured
    from taskstate.store import StateStore

    keys = SigningKeys.load()
    if keys is None and not is_loopback(host):
        raise click.UsageError(
            f"refusing to serve on {host}: with no [state_store] taskstate_secret_key anyone "
            "who reaches the port could read and write all state. Set the key "
            "(AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY) or bind to 127.0.0.1."
        )
    metrics = configured(prometheus=True)  # also kept for GET /taskstate/metrics
    store = StateStore(url or getattr(ctx.obj, "url", None), metrics=metrics)
    mode = (
        "tokens required (taskstate token create)"
        if keys is not None
        else "OPEN: no [state_store] taskstate_secret_key, so every request may read and write "
        "all state (loopback only)"
    )
    try:
        _check_port(host, port)
    except click.ClickException:
        store.close()
        raise
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}/taskstate"
    click.echo(
        f"taskstate serve: {store!r}; {mode}\n"
        f"  UI:      {base}/ui/\n"
        f"  API:     {base}/docs (its routes under /taskstate/api/v2/)\n"
        f"  health:  {base}/health",
        err=True,
    )
    options: dict[str, Any] = {
        "host": host, "port": port, "log_level": log_level, "server_header": False,
        "access_log": False, "log_config": log_config(log_level, log_format),  # logs.AccessLog
    }  # fmt: skip
    if workers == 1:
        uvicorn.run(standalone_app(store, keys, access_log=True), **options)
        return
    # Each process imports and builds its own app (`worker_app`), with the same store URL.
    store.close()
    chosen = url or getattr(ctx.obj, "url", None)
    if chosen:
        os.environ[_URL_ENV] = chosen
    uvicorn.run(f"{__name__}:worker_app", factory=True, workers=workers, **options)


_URL_ENV = "TASKSTATE_SERVE_URL"


def _check_port(host: str, port: int) -> None:
    """Bind as uvicorn will (SO_REUSEADDR) and let go, so a busy port fails here, before the
    banner says where we serve, with a sentence instead of uvicorn's errno line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise click.ClickException(
                    f"port {port} on {host} is in use (another taskstate serve?): stop it or "
                    "choose another with --port"
                ) from None
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def worker_app() -> ASGIApp:
    """The app of one `taskstate serve --workers N` process. Prometheus metrics are this
    process's own."""
    from taskstate.api.tokens import SigningKeys
    from taskstate.metrics import configured
    from taskstate.store import StateStore

    store = StateStore(os.environ.get(_URL_ENV) or None, metrics=configured(prometheus=True))
    return standalone_app(store, SigningKeys.load(), access_log=True)
