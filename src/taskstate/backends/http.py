"""The HTTP backend: `taskstate_url = http(s)://host[:port]/taskstate`, for workers that cannot
(or should not) reach the database. Every call is one of the HTTP API's routes
(`taskstate.api`, wire-compatible with Airflow 3.3's state-store routes).

Where the adaptation happens: a backend stores (namespace, key) → JSON text; the API speaks
scopes and JSON values. This module parses each namespace back into its scope
(`taskstate.scope.parse_namespace`) and sends the decoded value, so the server applies the same
store rules as a local call. What the server decides, not the caller:

- the clock: expiry is sent relative to the server's clock (the retention the caller asked
  for, anchored on the server's `Date`), and `updated_at` is the server's;
- the writer: `last_updated_by` comes from the credentials; `updated_by` is neither sent nor
  reported back;
- expired entries: the server never returns them (an expired key reads as absent anyway);
- expired-row cleanup and the schema: the server's own store (`count_expired`/`delete_expired`
  report 0, `migrate` applies nothing; `schema_status` asks `/taskstate/health`).

Atomic updates (`transact`, so `update` and `compare_and_set`) are read-with-ETag → compute →
`PUT If-Match` (or `If-None-Match: *` to create) → again on 412, so concurrent writers on other
machines lose nothing. Connection errors and 502/503/504 are retried with backoff for a bounded
window, then `BackendUnavailableError` names the host; a conditional PUT is retried only when
the request cannot have reached the server (a lost response would otherwise apply it twice).
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from taskstate.backends.base import Entry, Row, SchemaStatus, StateBackend
from taskstate.errors import (
    AccessDeniedError,
    BackendError,
    BackendUnavailableError,
    ConfigError,
    StaleTryError,
    ValueTooLargeError,
)
from taskstate.scope import (
    ASSET_KIND,
    META_KIND,
    SEP,
    TASK_KIND,
    AssetScope,
    TaskScope,
    parse_namespace,
)
from taskstate.settings import airflow_option

T = TypeVar("T")

RETRY_STATUSES = frozenset({502, 503, 504})
# Transport errors raised before the request left this machine: always safe to retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
PAGE = 100  # the API's maximum page size
TRANSACT_ATTEMPTS = 100  # 412s in a row before giving up (each means another writer won)
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class HttpBackend(StateBackend):
    """A client of a taskstate HTTP API (`taskstate serve`, or the Airflow plugin's routes)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry_window: float = 30.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"[state_store] taskstate_url = {url!r}: an HTTP store URL looks like "
                "http(s)://host[:port]/taskstate"
            )
        self.url = url
        self.host = parts.netloc.rpartition("@")[2]
        self._base = url.rstrip("/")
        # The pool token ([state_store] taskstate_token); a task may swap in its own (use_token).
        self._token = (
            token if token is not None else airflow_option("state_store", "taskstate_token")
        )
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
        self._retry_window = retry_window
        self._lock = threading.Lock()
        self._client: tuple[int, httpx.Client] | None = None
        self._async: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None
        self._server_offset: float | None = None  # server clock minus ours, from `Date`

    # -- credentials ----------------------------------------------------------------------

    def use_token(self, token: str | None) -> None:
        """Send `token` as the bearer from now on (the worker's minted task-instance token)."""
        self._token = token

    def with_token(self, token: str | None) -> HttpBackend:
        """This backend sending `token`, on the same connections: one per triggered task
        instance in a triggerer, without a connection pool each."""
        view = copy.copy(self)
        view._token = token
        view.client = self.client  # type: ignore[method-assign]  # opened on first request
        view.close = lambda: None  # type: ignore[method-assign]  # the connections are ours
        view._async = None
        return view

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    # -- plumbing -------------------------------------------------------------------------

    def client(self) -> httpx.Client:
        """One keep-alive client per process (a forked worker gets its own connections)."""
        pid = os.getpid()
        with self._lock:
            if self._client is None or self._client[0] != pid:
                self._client = (pid, httpx.Client(timeout=self._timeout))
            return self._client[1]

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._client[0] == os.getpid():
                self._client[1].close()
            self._client = None

    def describe(self) -> str:
        return self.url

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        retry = _Retry(self.host, self._retry_window)
        content, sent = self._prepare(body, headers)
        while True:
            try:
                response = self.client().request(
                    method, self._base + path, params=params, content=content, headers=sent
                )
            except httpx.TransportError as exc:
                time.sleep(retry.after(exc, idempotent))
                continue
            self._note_clock(response)
            if idempotent and response.status_code in RETRY_STATUSES:
                time.sleep(retry.after(f"HTTP {response.status_code}", idempotent))
                continue
            return response

    def _prepare(
        self, body: Any, headers: dict[str, str] | None
    ) -> tuple[bytes | None, dict[str, str]]:
        sent = {**self._headers(), **(headers or {})}
        if body is None:
            return None, sent
        sent["Content-Type"] = "application/json"
        return _encode(body).encode("utf-8"), sent

    def _note_clock(self, response: httpx.Response) -> None:
        date = response.headers.get("date")
        if date:
            try:
                server = email.utils.parsedate_to_datetime(date).timestamp()
            except (TypeError, ValueError):
                return
            # `Date` has 1 s resolution and is stamped before we read it: +0.5 s centres it.
            self._server_offset = server + 0.5 - time.time()

    def _check(self, response: httpx.Response, *, allow: tuple[int, ...] = ()) -> None:
        code = response.status_code
        if code < 300 or code in allow:
            return
        detail = _detail(response)
        if code in (401, 403):
            raise AccessDeniedError(
                f"the taskstate server at {self.host} refused this request ({code}: {detail}); "
                "check [state_store] taskstate_token (or taskstate_secret_key) on this worker"
            )
        if code == 409:
            raise StaleTryError(f"the taskstate server at {self.host} refused the write: {detail}")
        if code == 413:
            raise ValueTooLargeError(f"the taskstate server at {self.host}: {detail}")
        raise BackendError(f"the taskstate server at {self.host} answered {code}: {detail}")

    # -- namespaces → routes --------------------------------------------------------------

    def _key_path(self, namespace: str, key: str) -> tuple[str, dict[str, Any]]:
        base, params = self._collection(namespace)
        # `.` and `..` are keys, not path steps: encode them so no URL layer collapses them.
        segment = quote(key, safe="") if key not in (".", "..") else key.replace(".", "%2E")
        return f"{base}/{segment}", params

    def _collection(self, namespace: str) -> tuple[str, dict[str, Any]]:
        if namespace.startswith(META_KIND + SEP):
            scope = parse_namespace(TASK_KIND + namespace[len(META_KIND) :])
            assert isinstance(scope, TaskScope)
            return _task_path(scope, "taskstate-meta"), {"map_index": scope.map_index}
        scope = parse_namespace(namespace)
        if isinstance(scope, TaskScope):
            return _task_path(scope, "state-store"), {"map_index": scope.map_index}
        return "/api/v2/assets/state-store", {"name": scope.identity}

    # -- the contract ---------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Entry | None:
        return self._get(namespace, key)[0]

    def _get(self, namespace: str, key: str) -> tuple[Entry | None, str | None]:
        path, params = self._key_path(namespace, key)
        response = self._request("GET", path, params=params)
        if response.status_code == 404:
            return None, None
        self._check(response)
        return _entry(response.json()), response.headers.get("etag")

    def set(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        self._put(namespace, key, Entry(value, expires_at), now, {})

    def _put(
        self, namespace: str, key: str, entry: Entry, now: float, headers: dict[str, str]
    ) -> httpx.Response:
        path, params = self._key_path(namespace, key)
        body: dict[str, Any] = {"value": json.loads(entry.value)}
        if namespace.startswith(TASK_KIND + SEP):  # assets never expire; markers: server default
            body["expires_at"] = self._server_expiry(entry.expires_at, now)
        response = self._request(
            "PUT", path, params=params, body=body, headers=headers, idempotent=not headers
        )
        self._check(response, allow=(412,))
        return response

    def _server_expiry(self, expires_at: float | None, now: float) -> str | None:
        """The caller's retention (`expires_at - now`), anchored on the server's clock."""
        if expires_at is None:
            return None
        if self._server_offset is None:  # no answer seen yet: learn the server's clock first
            self._request("GET", "/health")
        at = time.time() + (self._server_offset or 0.0) + (expires_at - now)
        return datetime.fromtimestamp(at, tz=timezone.utc).isoformat()

    def delete(self, namespace: str, key: str) -> None:
        path, params = self._key_path(namespace, key)
        self._check(self._request("DELETE", path, params=params))

    def clear(self, namespace: str) -> int:
        # The API answers 204 without a count: count first (another writer may race it).
        meta = namespace.startswith(META_KIND + SEP)
        count = 0 if meta else sum(1 for row in self.scan(namespace) if row.namespace == namespace)
        path, params = self._collection(namespace)
        self._check(self._request("DELETE", path, params=params))
        return count

    def clear_prefix(self, prefix: str) -> int:
        if prefix.startswith(META_KIND + SEP):
            # Markers of the task instances that hold state (others expire on their own).
            task = TASK_KIND + prefix[len(META_KIND) :]
            for namespace in self._namespaces(task):
                self.clear(META_KIND + namespace[len(TASK_KIND) :])
            return 0  # markers are not state: not counted
        return sum(self.clear(namespace) for namespace in self._namespaces(prefix))

    def transact(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Entry | None], tuple[Entry | None, T]],
        now: float,
    ) -> T:
        for attempt in range(TRANSACT_ATTEMPTS):
            current, etag = self._get(namespace, key)
            new, result = fn(current)
            if new is None:
                return result
            condition = {"If-Match": etag} if etag else {"If-None-Match": "*"}
            if self._put(namespace, key, new, now, condition).status_code != 412:
                return result
            time.sleep(random.random() * min(0.002 * (attempt + 1), 0.05))  # spread contenders
        raise BackendError(
            f"the taskstate server at {self.host}: key {key!r} changed under "
            f"{TRANSACT_ATTEMPTS} attempts in a row to update it; try again"
        )

    def scan(self, prefix: str = "") -> Iterator[Row]:
        for namespace in self._namespaces(prefix):
            path, params = self._collection(namespace)
            offset = 0
            while True:
                page = self._json("GET", path, {**params, "limit": PAGE, "offset": offset})
                items = page.get("task_state_store", page.get("asset_state_store", []))
                for item in items:
                    entry = _entry(item)
                    yield Row(
                        namespace,
                        item["key"],
                        entry.value,
                        entry.expires_at,
                        _epoch(item["updated_at"]),
                    )
                offset += len(items)
                if not items or offset >= page["total_entries"]:
                    break

    def _namespaces(self, prefix: str) -> list[str]:
        """The namespaces holding state under `prefix` (a string prefix, as every backend
        matches it), found through the discovery routes, in order."""
        found: list[str] = []
        if TASK_KIND.startswith(prefix) or prefix.startswith(TASK_KIND + SEP):
            fields = prefix[2:].split(SEP) if prefix.startswith(TASK_KIND + SEP) else [""]
            found.extend(self._task_namespaces(fields))
        if ASSET_KIND.startswith(prefix) or prefix.startswith(ASSET_KIND + SEP):
            assets = self._pages("/api/v2/assets", "assets")
            found.extend(AssetScope(name=item["name"]).namespace for item in assets)
        return sorted(ns for ns in found if ns.startswith(prefix))

    def _task_namespaces(self, fields: list[str]) -> Iterator[str]:
        """Walk dags → runs → task instances; every field but the last is complete."""

        def level(path: str, items: str, name: str, depth: int) -> Iterator[str]:
            if depth < len(fields) - 1:
                yield fields[depth]
            else:
                yield from (str(item[name]) for item in self._pages(path, items))

        for dag in level("/api/v2/dags", "dags", "dag_id", 0):
            runs = f"/api/v2/dags/{quote(dag, safe='')}/dagRuns"
            for run in level(runs, "dag_runs", "dag_run_id", 1):
                tis = f"{runs}/{quote(run, safe='')}/taskInstances"
                for item in self._pages(tis, "task_instances"):
                    yield TaskScope(dag, run, item["task_id"], item["map_index"]).namespace

    def _pages(self, path: str, items: str) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            page = self._json("GET", path, {"limit": PAGE, "offset": offset})
            yield from page[items]
            offset += len(page[items])
            if not page[items] or offset >= page["total_entries"]:
                return

    def _json(self, method: str, path: str, params: dict[str, Any]) -> Any:
        response = self._request(method, path, params=params)
        self._check(response)
        return response.json()

    def count_expired(self, now: float) -> int:
        return 0  # the server hides expired rows and its own store cleans them up

    def delete_expired(self, now: float, limit: int) -> int:
        return 0

    def schema_status(self) -> SchemaStatus:
        """Reachable and serving: the server's store keeps its own schema current."""
        self._json("GET", "/health", {})
        return SchemaStatus(current=0, latest=0)

    def migrate(self) -> list[int]:
        return []

    # -- async twins: one async client per event loop -------------------------------------

    async def aget(self, namespace: str, key: str) -> Entry | None:
        path, params = self._key_path(namespace, key)
        response = await self._arequest("GET", path, params)
        if response.status_code == 404:
            return None
        self._check(response)
        return _entry(response.json())

    async def aset(
        self,
        namespace: str,
        key: str,
        value: str,
        expires_at: float | None,
        now: float,
        updated_by: str | None = None,
    ) -> None:
        path, params = self._key_path(namespace, key)
        body: dict[str, Any] = {"value": json.loads(value)}
        if namespace.startswith(TASK_KIND + SEP):  # assets never expire; markers: server default
            body["expires_at"] = self._server_expiry(expires_at, now)
        self._check(await self._arequest("PUT", path, params, body))

    async def adelete(self, namespace: str, key: str) -> None:
        path, params = self._key_path(namespace, key)
        self._check(await self._arequest("DELETE", path, params))

    async def aclear(self, namespace: str) -> int:
        path, params = self._collection(namespace)
        page = await self._arequest("GET", path, {**params, "limit": 1})
        self._check(page)
        self._check(await self._arequest("DELETE", path, params))
        return int(page.json()["total_entries"])

    async def _arequest(
        self, method: str, path: str, params: dict[str, Any], body: Any = None
    ) -> httpx.Response:
        retry = _Retry(self.host, self._retry_window)
        content, headers = self._prepare(body, None)
        while True:
            try:
                response = await self._aclient().request(
                    method, self._base + path, params=params, content=content, headers=headers
                )
            except httpx.TransportError as exc:
                await asyncio.sleep(retry.after(exc, True))
                continue
            self._note_clock(response)
            if response.status_code in RETRY_STATUSES:
                await asyncio.sleep(retry.after(f"HTTP {response.status_code}", True))
                continue
            return response

    def _aclient(self) -> httpx.AsyncClient:
        """One keep-alive async client per event loop (a client is bound to its loop)."""
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, httpx.AsyncClient(timeout=self._timeout))
        return self._async[1]


class _Retry:
    """Backoff with jitter inside a bounded window, then `BackendUnavailableError`."""

    def __init__(self, host: str, window: float) -> None:
        self.host = host
        self.window = window
        self.deadline = time.monotonic() + window
        self.delay = 0.1

    def after(self, problem: Exception | str, idempotent: bool) -> float:
        """Seconds to wait before trying again; raises when retrying is not allowed or over."""
        sent = not isinstance(problem, (str, *_NOT_SENT))
        what = problem if isinstance(problem, str) else f"{type(problem).__name__}: {problem}"
        if sent and not idempotent:  # it may have been applied: never apply it twice
            raise BackendUnavailableError(
                f"the taskstate server at {self.host} did not answer a conditional write "
                f"({what}); it may or may not have been applied"
            ) from (problem if isinstance(problem, Exception) else None)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise BackendUnavailableError(
                f"the taskstate server at {self.host} is unavailable ({what}) after retrying "
                f"for {self.window:g} s; check that it runs and that this machine reaches it "
                "([state_store] taskstate_url)"
            )
        wait = min(self.delay * (0.5 + random.random()), remaining)
        self.delay = min(self.delay * 2, 2.0)
        return wait


def _task_path(scope: TaskScope, leaf: str) -> str:
    parts = (quote(p, safe="") for p in (scope.dag_id, scope.run_id, scope.task_id))
    dag, run, task = parts
    return f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{leaf}"


def _entry(item: dict[str, Any]) -> Entry:
    # No `updated_by`: the server records the writer from the credentials, and a backend
    # reports only what its caller can have written.
    expires = item.get("expires_at")
    return Entry(_encode(item["value"]), None if expires is None else _epoch(expires))


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text[:200]
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
    return str(detail)
