"""The HTTP client: `taskstate_url = http(s)://host[:port]/taskstate`, for workers that cannot
(or should not) reach the database.

Values travel at the value level (`taskstate.remote`'s accessors): one JSON encoding on the
worker, the server's rules and clock. This module is the transport under them, and the
store-level operations that have a route:

- `HttpClient.send`: one request, its answer checked against the wire (`taskstate.wire`): a
  refusal raises the class the server's store raised (`X-Taskstate-Error`); a 404 without it
  is "no such route" (`ConfigError`, a wrong base URL), not "no such key"; an answer that is
  not this API's (an SSO page's 200 `text/html`) is a `ConfigError` naming the URL — never
  success. One retry rule (`Retry`): transient failures only (connection refused or reset,
  408/429/502/503/504), within a bounded window; a name that does not resolve and a TLS error
  are not transient. Idempotent requests are sent again; so is a conditional write carrying a
  write id when the server keeps the write ledger (it says so on every answer,
  `wire.WRITE_IDS_HEADER`): the same request, the same id, answered with the first outcome if
  it had landed. Any other write whose answer was lost (a timeout, a reset, a proxy's 502/504)
  is `OutcomeUnknownError`, never sent again; so is a re-sent one still unanswered when the
  window ends.
- `HttpBackend`: what `StateStore` needs beyond the accessors. Listing (`scan`, so `entries`
  and `scopes`) walks the discovery routes; `clear`/`clear_prefix` (`clear_task`) are the
  DELETE routes; `schema_status` asks `/health`. Operations that only make sense where the
  database is (`cleanup`, `import`, `migrate`) raise `ConfigError` instead of reporting 0.

The transport, picked by measurement (`bench/http_transport.py`): the standard library's
`http.client` with one keep-alive connection per thread (a forked child opens its own), for
every call: the accessors' async twins make the same calls on taskstate's thread pool, which
keeps a trigger's state calls off the triggerer's event loop (`bench/trigger_loop_lag.py`). It
checks the server's certificate against the system's trust store
(`ssl.create_default_context()`), and goes through the proxy the environment names, as
requests and httpx read it (`environment_proxy`: `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY`,
unless `NO_PROXY` covers the host): an `https://` store through a CONNECT tunnel (TLS end to
end, the server's certificate checked), an `http://` one by asking the proxy for the absolute
URL.

The URL's user info (`https://user:pass@host/...`) is neither printed nor sent: the bearer
token is the credential.
"""

from __future__ import annotations

import base64
import copy
import http.client
import ipaddress
import json
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, NamedTuple, NoReturn, Protocol
from urllib.parse import quote, unquote, urlencode, urlsplit
from urllib.request import getproxies_environment

from taskstate import wire
from taskstate.backends.backoff import Backoff
from taskstate.backends.base import Entry, Row, SchemaStatus, StateBackend
from taskstate.errors import (
    BackendUnavailableError,
    ConfigError,
    OutcomeUnknownError,
    TaskStateError,
)
from taskstate.redaction import redact_url
from taskstate.scope import ASSET_KIND, META_KIND, SEP, TASK_KIND, TaskScope, parse_namespace
from taskstate.settings import credential
from taskstate.values import encode_value

TRANSIENT = frozenset({408, 429, 502, 503, 504})
# The transport's pacing between re-sends (an outage, a restart): from 0.1 s up to 2 s.
RETRY_FIRST_S = 0.1
RETRY_CAP_S = 2.0


class Request:
    """One request, prepared once (and sent again as it is by the retry rule)."""

    __slots__ = ("body", "headers", "idempotent", "method", "params", "path", "retry")

    def __init__(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        idempotent: bool = True,
        retry: bool = True,
    ) -> None:
        """`retry=False`: the first answer is the answer (a readiness probe asks about now)."""
        self.method = method
        self.path = path
        self.params = dict(params or {})
        self.body = body
        self.headers = dict(headers or {})
        self.idempotent = idempotent
        self.retry = retry


def json_body(fields: Mapping[str, Any], value_text: str | None = None) -> bytes:
    """A request body; `value_text` is the value already encoded (sent as it is, not again)."""
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    if value_text is not None:
        inner = text[1:-1]
        text = '{"value":' + value_text + ("," + inner if inner else "") + "}"
    return text.encode("utf-8", "surrogatepass")


class Headers(Protocol):
    """A response's headers, looked up case-insensitively (http.client's are)."""

    def get(self, name: str, default: Any = None) -> Any:
        """The value of header `name` (any case), or `default`."""

    def __contains__(self, name: str, /) -> bool: ...


class Response:
    """An answer, read whole."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: Headers, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.content)

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class NoAnswer(Exception):
    """A request that got no answer. `sent` is False when it certainly never reached the
    server (the connection could not be opened), so even a write may be sent again."""

    def __init__(self, problem: BaseException, *, sent: bool) -> None:
        super().__init__(str(problem))
        self.problem = problem
        self.sent = sent


class Proxy(NamedTuple):
    """A proxy the environment names: where to connect, and its credentials' header."""

    hostport: str
    authorization: str | None  # the Proxy-Authorization header, from the proxy URL's user info
    shown: str  # for messages: its password hidden


def environment_proxy(scheme: str, hostport: str) -> Proxy | None:
    """The proxy for `scheme://hostport` the environment names, as requests and httpx read it:
    `<scheme>_proxy`, else `all_proxy` (lower case before upper case; `HTTP_PROXY` is ignored
    in a CGI request), unless `no_proxy` covers the host (`no_proxy_covers`). Only `http://`
    proxies are spoken to (a `socks5://` or `https://` proxy is a `ConfigError`)."""
    proxies = getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url or no_proxy_covers(proxies.get("no", ""), hostport):
        return None
    if "://" not in url:
        url = "http://" + url  # `proxy:3128`, as requests reads it
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(
            f"the proxy {shown!r} (from the {scheme}_proxy / all_proxy environment variable) is "
            "not an http:// proxy; taskstate's client speaks to http:// proxies only: set "
            f"no_proxy to the taskstate server's host to connect directly"
        )
    authorization = None
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")
    port = parts.port or 80
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Proxy(f"{host}:{port}", authorization, shown)


def no_proxy_covers(no_proxy: str, hostport: str) -> bool:
    """Whether `no_proxy` (comma-separated) covers `hostport`: `*`; a host name, which covers
    its subdomains too (`example.com`, `.example.com`, `*.example.com`); an IP address or a
    network (`10.0.0.0/8`); any of them with `:port` for that port only."""
    parts = urlsplit(f"//{hostport}")
    host, port = (parts.hostname or "").lower(), parts.port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        if not entry:
            continue
        name, entry_port = entry, None
        if entry.startswith("[") or (entry.count(":") == 1 and not entry.endswith("]")):
            split = urlsplit(f"//{entry}")
            try:
                name, entry_port = split.hostname or "", split.port
            except ValueError:
                continue
        if entry_port is not None and entry_port != port:
            continue
        name = name.strip("[]")
        if address is not None:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = name.removeprefix("*").removeprefix(".")
        if host == name or host.endswith("." + name):
            return True
    return False


class _ThreadConnection(threading.local):
    """This thread's keep-alive connection, and the process that opened it."""

    connection: http.client.HTTPConnection | None = None
    pid = 0


# Every open connection, so `close()` reaches other threads' too. The lock is held only to
# open or close one (never during a request), and a forked child gets a fresh one.
_OPEN_LOCK = threading.Lock()


def _fresh_lock() -> None:
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock)


class HttpClient:
    """Keep-alive connections to one taskstate API, one per thread (the async twins run the
    same calls on taskstate's thread pool), and the checks every answer goes through."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry_window: float = 30.0,
    ) -> None:
        scheme, sep, rest = url.partition("://")
        hostport = rest.split("/", 1)[0].rpartition("@")[2]
        if scheme not in ("http", "https") or not sep or not hostport.strip(":"):
            raise ConfigError(
                f"[state_store] taskstate_url = {redact_url(url)!r}: an HTTP store URL looks "
                "like http(s)://host[:port]/taskstate"
            )
        userinfo, at, _ = rest.partition("/")[0].rpartition("@")
        path = rest[len(userinfo) + len(at) :][len(hostport) :].rstrip("/")
        # Without its user info: it is never sent (the token is the credential).
        self.base = f"{scheme}://{hostport}{path}"
        self.host = hostport
        try:
            http.client.HTTPConnection(hostport)  # parses the port, opens nothing
        except http.client.InvalidURL as exc:
            raise ConfigError(
                f"[state_store] taskstate_url = {redact_url(url)!r}: {exc}; an HTTP store URL "
                "looks like http(s)://host[:port]/taskstate"
            ) from None
        self._origin = f"{scheme}://{hostport}"
        self._prefix = quote(path, safe="/%")  # the request line is ASCII
        self._https = scheme == "https"
        # A callable is asked on every request (a trigger's token, re-minted as it ages).
        self.token: str | Callable[[], str | None] | None = (
            token if token is not None else credential("taskstate_token")
        )
        self._timeout = timeout
        self._connect_timeout = min(timeout, 5.0)
        self.retry_window = retry_window
        self._tls: ssl.SSLContext | None = None
        self.proxy = environment_proxy(scheme, hostport)
        # Who the messages name: the server, and the proxy in between.
        self.label = hostport if self.proxy is None else f"{hostport} via {self.proxy.shown}"
        self._local = _ThreadConnection()
        self._open: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        # The server said it keeps the write ledger (`wire.WRITE_IDS_HEADER`, on every state
        # route's answer): a write carrying a write id may then be re-sent as it is.
        self.ledger = False
        # Update operations go to the server's update route until it says it has none.
        self.update_route = True

    def _headers(self, request: Request) -> dict[str, str]:
        sent = {"Accept": wire.JSON_TYPE}
        token = self.token() if callable(self.token) else self.token
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if request.body is not None:
            sent["Content-Type"] = wire.JSON_TYPE
        sent.update(request.headers)
        return sent

    def _target(self, request: Request) -> str:
        """The request line's target: the base path, the route (already escaped), the query."""
        target = self._prefix + request.path
        return f"{target}?{urlencode(request.params)}" if request.params else target

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    # -- synchronous: http.client, one keep-alive connection per thread --------------------

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection, open. A new one after a fork (the parent's socket is not
        this process's to use), after `close()`, and when the idle one was closed by the
        server (its keep-alive timeout): writing into that would lose the request."""
        local = self._local
        conn = local.connection
        if conn is not None and local.pid == os.getpid():
            if conn.sock is not None and not _dropped(conn.sock):
                return conn
            conn.close()
        proxy = self.proxy
        to = self.host if proxy is None else proxy.hostport
        conn = (
            http.client.HTTPSConnection(
                to, timeout=self._connect_timeout, context=self._tls_context()
            )
            if self._https
            else http.client.HTTPConnection(to, timeout=self._connect_timeout)
        )
        if proxy is not None and self._https:  # CONNECT, then TLS with the server itself
            auth = (
                {} if proxy.authorization is None else {"Proxy-Authorization": proxy.authorization}
            )
            conn.set_tunnel(self.host, headers=auth)
        local.connection, local.pid = None, os.getpid()
        try:
            conn.connect()  # raises before anything is sent
        except BaseException:
            conn.close()  # a TCP connection whose TLS handshake failed
            raise
        conn.sock.settimeout(self._timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with _OPEN_LOCK:
            self._open.add(conn)
        local.connection = conn
        return conn

    def _exchange(self, request: Request) -> Response:
        """One request on this thread's connection, the answer read whole."""
        try:
            conn = self._connection()
        except OSError as exc:  # refused, unreachable, no such name, TLS handshake, timeout
            if str(exc).startswith("Tunnel connection failed: 407"):  # http.client's CONNECT
                self._proxy_refused("407")
            raise NoAnswer(exc, sent=False) from exc
        try:
            target, headers = self._target(request), self._headers(request)
            proxy = self.proxy
            if proxy is not None and not self._https:  # the proxy is asked for the whole URL
                target = self._origin + target
                if proxy.authorization is not None:
                    headers["Proxy-Authorization"] = proxy.authorization
            conn.request(request.method, target, request.body, headers)
            answer = conn.getresponse()
            content = answer.read()
        except BaseException as exc:
            # Half an exchange leaves the connection unusable (an interrupt too: its answer
            # would be read as the next request's).
            conn.close()
            if isinstance(exc, (OSError, http.client.HTTPException)):
                raise NoAnswer(exc, sent=True) from exc
            raise
        if answer.will_close:
            conn.close()
        return Response(answer.status, answer.headers, content)

    def close(self) -> None:
        """Close every connection this process opened (other threads open new ones if they
        send again)."""
        with _OPEN_LOCK:
            opened = list(self._open)
            self._open.clear()
        for conn in opened:
            conn.close()

    def send(self, request: Request) -> Response:
        """Send with the retry rule; the checked answer (an error status raises)."""
        retry = Retry(self.label, self.retry_window if request.retry else 0.0)
        while True:
            # A write with an id goes again as it is when the server keeps the ledger: a copy
            # that did land answers with its first outcome, never applied twice.
            resend = request.idempotent or (self.ledger and wire.WRITE_ID_HEADER in request.headers)
            try:
                response = self._exchange(request)
            except NoAnswer as failure:
                time.sleep(retry.after(failure, request.idempotent, resend))
                continue
            if not self.ledger and wire.WRITE_IDS_HEADER in response.headers:
                self.ledger = response.headers.get(wire.WRITE_IDS_HEADER) == wire.WRITE_IDS_RECORDED
            wait = retry.after_status(response, request.idempotent, resend)
            if wait is None:
                return self._checked_resend(request, response, retry)
            time.sleep(wait)

    def _checked_resend(self, request: Request, response: Response, retry: Retry) -> Response:
        """`check`, except that a re-sent write answered as a request this server does not
        know (an older replica behind the same balancer, mid-upgrade, has no such route) left
        the first copy's outcome unknown: that is the error, never a reason to try another way
        (which could apply the write twice)."""
        try:
            return self.check(request, response)
        except ConfigError as exc:
            if not retry.unknown:
                raise
            raise OutcomeUnknownError(
                f"the taskstate server at {self.host} did not answer a write ({retry.unknown}), "
                f"and its re-sent copy met a server that does not know the request ({exc}); it "
                "may or may not have been applied, and it was not applied again. Read the key "
                "to see, and upgrade every server behind the balancer"
            ) from exc

    # -- answers -------------------------------------------------------------------------

    def check(self, request: Request, response: Response) -> Response:
        """The answer if it is this API's success; else the typed error it stands for."""
        code = response.status_code
        where = f"{self.host} ({request.method} {self.base}{request.path})"
        if 200 <= code < 300:
            if code == 204 or _is_json(response):
                return response
            self._not_this_api(response, where)
        if code == 304:
            return response
        if code >= 400 and (wire.ERROR_HEADER in response.headers or _is_json(response)):
            body: Any = _json_or_text(response)
            raise wire.error_from_response(
                code, response.headers.get(wire.ERROR_HEADER), body, where
            )
        if code == 407:
            self._proxy_refused("407")
        if code in (401, 403, 413) or code in TRANSIENT:
            raise wire.error_from_response(code, None, response.text[:200], where)
        self._not_this_api(response, where)

    def _proxy_refused(self, status: str) -> NoReturn:
        shown = "the proxy" if self.proxy is None else f"the proxy {self.proxy.shown}"
        raise ConfigError(
            f"{shown} refused to carry requests to {self.host} ({status} Proxy Authentication "
            "Required): give its credentials in the proxy variable "
            "(http://user:password@proxy:port), or set no_proxy to connect directly"
        )

    def _not_this_api(self, response: Response, where: str) -> NoReturn:
        kind = response.headers.get("content-type", "no content type")
        raise ConfigError(
            f"{where} answered {response.status_code} {kind}, not the taskstate API's JSON "
            "(a login page or a wrong URL?); nothing was read or written. Check "
            "[state_store] taskstate_url: it names the API's base, http(s)://host[:port]/taskstate"
        )


class Retry:
    """What may be sent again, paced by `Backoff` (jittered, 0.1 s growing to 2 s) inside a
    window counted from the request's start; then `BackendUnavailableError`."""

    def __init__(self, host: str, window: float) -> None:
        self.host = host
        self.window = window
        self._backoff = Backoff(
            window, first_s=RETRY_FIRST_S, cap_s=RETRY_CAP_S, jitter=True, started=time.monotonic()
        )
        self.unknown = ""  # how a write re-sent with its id lost an answer (it may have landed)

    def after(self, failure: NoAnswer, idempotent: bool, resend: bool = False) -> float:
        """Seconds to wait before sending again; raises when that is not allowed or over.
        `resend`: a write that may go again as it is (its id is in the server's ledger)."""
        problem = failure.problem
        what = f"{type(problem).__name__}: {problem}"
        cause = _root_cause(problem)
        if not failure.sent and isinstance(cause, ssl.SSLError):
            raise ConfigError(
                f"TLS with the taskstate server at {self.host} failed ({cause}); check its "
                "certificate and [state_store] taskstate_url"
            ) from problem
        if isinstance(cause, socket.gaierror):
            raise ConfigError(
                f"the taskstate server's name {self.host!r} does not resolve ({cause}); check "
                "[state_store] taskstate_url"
            ) from problem
        if failure.sent and not idempotent:
            if not resend:
                raise OutcomeUnknownError(
                    f"the taskstate server at {self.host} did not answer a write ({what}); it "
                    "may or may not have been applied"
                ) from problem
            self.unknown = what
        return self._wait(what)

    def after_status(
        self, response: Response, idempotent: bool, resend: bool = False
    ) -> float | None:
        """Seconds to wait before sending again after `response`'s status, or None to take
        the answer. A 503 means the write was certainly not applied, so even a conditional
        one is sent again. A 502 or 504 comes from a proxy (the taskstate server answers
        neither) that may have handed the write to a server before it failed: its outcome is
        unknown, like a lost answer's, so it is sent again only as `resend` allows."""
        status = response.status_code
        if not idempotent and status in (502, 504):
            what = f"a proxy answered HTTP {status}"
            if not resend:
                raise OutcomeUnknownError(
                    f"a proxy in front of the taskstate server at {self.host} answered a write "
                    f"with HTTP {status}; it may or may not have been applied"
                )
            self.unknown = what
            return self._wait(what)
        if resend and status == 500 and _unknown_outcome(response):
            # The server's store lost its COMMIT's answer: asked again, its ledger knows.
            self.unknown = "the store lost the answer to its COMMIT"
            return self._wait(self.unknown)
        if status not in TRANSIENT or (not idempotent and status != 503):
            return None
        what = f"HTTP {status}"
        if _is_json(response):  # the server's reason (an unready store says which)
            what += ": " + wire.detail_text(_json_or_text(response))
        return self._wait(what)

    def _wait(self, what: str) -> float:
        wait = self._backoff.next_wait()
        if wait is None and self.unknown:
            raise OutcomeUnknownError(
                f"the taskstate server at {self.host} did not answer a write ({self.unknown}), "
                f"re-sent with its write id for {self.window:g} s (last: {what}); it may or may "
                "not have been applied, and it was applied at most once. Read the key to see"
            )
        if wait is None:
            tried = f" after retrying for {self.window:g} s" if self.window else ""
            raise BackendUnavailableError(
                f"the taskstate server at {self.host} is unavailable ({what}){tried}; check "
                "that it runs and that this machine reaches it ([state_store] taskstate_url)"
            )
        return wait


def _root_cause(exc: BaseException) -> BaseException:
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return seen


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive connection with something to read was closed by the server (or got
    bytes no request asked for): it must not carry the next request."""
    try:
        if hasattr(select, "poll"):  # no limit on the descriptor's number, unlike select()
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _unknown_outcome(response: Response) -> bool:
    """The server's store could not tell whether this write committed (its 500's class)."""
    return bool(response.headers.get(wire.ERROR_HEADER) == OutcomeUnknownError.__name__)


def _is_json(response: Response) -> bool:
    kind = response.headers.get("content-type", "")
    return bool(kind.split(";")[0].strip() == wire.JSON_TYPE)


def _json_or_text(response: Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


def _room_for_the_database(operation: str) -> NoReturn:
    raise ConfigError(
        f"{operation} has no route in the taskstate HTTP API: run it where the database is "
        "(with [state_store] taskstate_url naming the database, e.g. on the server)"
    )


class HttpBackend(StateBackend):
    """The store-level operations over HTTP. The accessors (`taskstate.remote`) carry values;
    row-level reads and writes are not part of the wire and refuse with `ConfigError`."""

    remote = True  # StateStore hands out `taskstate.remote`'s accessors for this backend

    def __init__(self, url: str, *, token: str | None = None, **options: float) -> None:
        self.http = HttpClient(url, token=token, **options)
        self.url = url

    def use_token(self, token: str | None) -> None:
        """Send `token` as the bearer from now on (the worker's minted task-instance token)."""
        self.http.token = token

    def with_token(self, token: str | Callable[[], str | None] | None) -> HttpBackend:
        """This backend sending `token` (or what the callable answers at each request), on the
        same connections: one per triggered task instance in a triggerer, without a connection
        pool each."""
        http = copy.copy(self.http)  # shares the per-thread connections (`_local`)
        http.token = token
        http.close = lambda: None  # type: ignore[method-assign]  # the connections are ours
        view = copy.copy(self)
        view.http = http
        return view

    def describe(self) -> str:
        """As `StateBackend.describe`: the base URL, credentials redacted."""
        return redact_url(self.http.base)

    def close(self) -> None:
        """As `StateBackend.close`: closes the connections this process opened."""
        self.http.close()

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET `path` with `params` and return the answer's JSON."""
        return self.http.send(Request("GET", path, params)).json()

    # -- store-level operations with a route ----------------------------------------------

    def scan(self, prefix: str = "") -> Iterator[Row]:
        """As `StateBackend.scan`: the namespaces from the discovery routes, then their pages."""
        for namespace in self._namespaces(prefix):
            scope = parse_namespace(namespace)
            if isinstance(scope, TaskScope):
                path, field = wire.task_path(scope), wire.TASK_ITEMS
                params: dict[str, Any] = {wire.MAP_INDEX: scope.map_index}
            else:
                path, field = wire.ASSET_STATE, wire.ASSET_ITEMS
                params = {wire.NAME: scope.identity}
            for item in self._pages(path, field, params):
                entry = wire.entry_from_json(item)
                writer = entry.updated_by
                yield Row(
                    namespace,
                    entry.key,
                    encode_value(entry.value),
                    entry.expires_at,
                    entry.updated_at,
                    None if writer is None else json.dumps(writer, separators=(",", ":")),
                )

    def _namespaces(self, prefix: str) -> list[str]:
        """The namespaces holding state under `prefix`, found through the discovery routes."""
        found: list[str] = []
        if TASK_KIND.startswith(prefix) or prefix.startswith(TASK_KIND + SEP):
            fields = prefix[2:].split(SEP) if prefix.startswith(TASK_KIND + SEP) else [""]
            found.extend(self._task_namespaces(fields))
        if ASSET_KIND.startswith(prefix) or prefix.startswith(ASSET_KIND + SEP):
            found.extend(
                ASSET_KIND + SEP + item[wire.NAME] for item in self._pages(wire.ASSETS, "assets")
            )
        return sorted(ns for ns in found if ns.startswith(prefix))

    def _task_namespaces(self, fields: list[str]) -> Iterator[str]:
        """Walk dags → runs → task instances; every field but the last is complete."""

        def level(path: str, items: str, name: str, depth: int) -> Iterator[str]:
            if depth < len(fields) - 1:
                yield fields[depth]
            else:
                yield from (str(item[name]) for item in self._pages(path, items))

        for dag in level(wire.DAGS, "dags", "dag_id", 0):
            runs = wire.DAG_RUNS.format(dag_id=wire.segment(dag))
            for run in level(runs, "dag_runs", "dag_run_id", 1):
                tis = wire.TASK_INSTANCES.format(
                    dag_id=wire.segment(dag), dag_run_id=wire.segment(run)
                )
                for item in self._pages(tis, "task_instances"):
                    yield TaskScope(dag, run, item["task_id"], item[wire.MAP_INDEX]).namespace

    def _pages(
        self, path: str, items: str, params: Mapping[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            page = self.get_json(
                path, {**(params or {}), wire.LIMIT: wire.MAX_PAGE, wire.OFFSET: offset}
            )
            yield from page[items]
            offset += len(page[items])
            if not page[items] or offset >= page[wire.TOTAL]:
                return

    def clear(self, namespace: str) -> int:
        """As `StateBackend.clear`: counts the namespace's rows, then one DELETE route call."""
        return self._clear(namespace, all_map_indices=False)

    def clear_prefix(self, prefix: str) -> int:
        """`clear_task` of every map index: one DELETE per task instance, markers too."""
        if prefix.startswith(META_KIND + SEP):
            return 0  # the state route's clear removes the markers with the state
        fields = prefix[2:].rstrip(SEP).split(SEP)
        if not prefix.startswith(TASK_KIND + SEP) or len(fields) != 3:
            _room_for_the_database("deleting the state of more than one task")
        scope = TaskScope(fields[0], fields[1], fields[2])
        return self._clear(scope.namespace, all_map_indices=True)

    def _clear(self, namespace: str, *, all_map_indices: bool) -> int:
        # The route answers 204 without a count: count first (another writer may race it).
        prefix = namespace.rpartition(SEP)[0] + SEP if all_map_indices else namespace
        count = sum(1 for row in self.scan(prefix) if all_map_indices or row.namespace == namespace)
        if namespace.startswith(META_KIND + SEP):
            scope = parse_namespace(TASK_KIND + namespace[len(META_KIND) :])
            assert isinstance(scope, TaskScope)
            path = wire.task_path(scope, wire.TASK_META)
            params: dict[str, Any] = {wire.MAP_INDEX: scope.map_index}
        else:
            found = parse_namespace(namespace)
            if isinstance(found, TaskScope):
                path = wire.task_path(found)
                params = {wire.MAP_INDEX: found.map_index}
                if all_map_indices:
                    params = {wire.ALL_MAP_INDICES: "true"}
            else:
                path, params = wire.ASSET_STATE, {wire.NAME: found.identity}
        self.http.send(Request("DELETE", path, params))
        return count

    def restore_task(
        self, dag_id: str, run_id: str, task_id: str, as_of: datetime, map_index: int | None
    ) -> int:
        """`StateStore.restore_task` over HTTP: the server's store restores in one transaction
        and records this token's subject as the writer."""
        scope = TaskScope(dag_id, run_id, task_id, -1 if map_index is None else map_index)
        params: dict[str, Any] = (
            {wire.ALL_MAP_INDICES: "true"} if map_index is None else {wire.MAP_INDEX: map_index}
        )
        body = json.dumps({wire.AS_OF: wire.instant_text(as_of)}).encode()
        path = wire.task_path(scope, wire.TASK_HISTORY)
        request = Request("POST", path, params, body, idempotent=False)
        return int(self.http.send(request).json()[wire.RESTORED])

    def restore_task_preview(
        self, dag_id: str, run_id: str, task_id: str, as_of: datetime, map_index: int | None
    ) -> list[tuple[int, str, Any, Any]]:
        """`StateStore.restore_task_preview` over HTTP: (map index, key, then, now) per key."""
        scope = TaskScope(dag_id, run_id, task_id, -1 if map_index is None else map_index)
        params: dict[str, Any] = (
            {wire.ALL_MAP_INDICES: "true"} if map_index is None else {wire.MAP_INDEX: map_index}
        )
        params[wire.AS_OF] = wire.instant_text(as_of)
        path = wire.task_path(scope, wire.TASK_HISTORY)
        found = self.http.send(Request("GET", path, params)).json()[wire.CHANGES]
        return [(c[wire.MAP_INDEX], c[wire.KEY], c[wire.THEN], c[wire.NOW]) for c in found]

    def schema_status(self) -> SchemaStatus:
        """Reachable and serving: the server's store keeps its own schema current. Asked once,
        not retried: `db check` and `doctor` report the server as it is now (a 503 from an
        unready store is a `BackendUnavailableError`, exit 1)."""
        health = self.http.send(Request("GET", wire.HEALTH, retry=False)).json()
        if not isinstance(health, dict) or health.get("status") != "ok":
            raise BackendUnavailableError(f"{self.describe()}/health answered {health!r}")
        return SchemaStatus(current=0, latest=0)

    # -- where the database is ------------------------------------------------------------

    def count_expired(self, now: float) -> int:
        """Refused with `ConfigError`: no route; cleanup runs where the database is."""
        _room_for_the_database("cleanup (counting expired rows)")

    def delete_expired(self, now: float, limit: int) -> int:
        """Refused with `ConfigError`: no route; cleanup runs where the database is."""
        _room_for_the_database("cleanup")

    def migrate(self) -> list[int]:
        """Refused with `ConfigError`: no route; `db migrate` runs where the database is."""
        _room_for_the_database("db migrate")

    def set_many(self, rows: list[Row], *, replace: bool = True) -> int:
        """Refused with `ConfigError`: no route; an import runs where the database is."""
        _room_for_the_database("import (all keys or none)")

    # -- row level: not on the wire (the accessors send values) ---------------------------

    def get(self, namespace: str, key: str) -> Entry | None:
        """Refused with `TaskStateError`: the HTTP backend carries values, not rows."""
        _row_level()

    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        """Refused with `TaskStateError`: the HTTP backend carries values, not rows."""
        _row_level()

    def delete(self, namespace: str, key: str) -> None:
        """Refused with `TaskStateError`: the HTTP backend carries values, not rows."""
        _row_level()

    def transact(self, namespace: str, key: str, fn: Any, now: float) -> Any:
        """Refused with `TaskStateError`: the HTTP backend carries values, not rows."""
        _row_level()


def _row_level() -> NoReturn:
    raise TaskStateError(
        "the HTTP backend carries values, not rows: use StateStore(url).task_state(...) / "
        ".asset_state(...), whose accessors speak the API"
    )
