"""The accessors over HTTP, at the value level: what `StateStore(http(s)://...)` hands out.

A value is encoded once, here, checked against the same key, scope and value rules as a local
write (so a refusal costs no round trip and reads the same), and sent as JSON; the server
applies its store's rules again, stamps its own clock and records the writer from the
credentials. Expiry is a retention (`expires_in`), counted by the server's clock. The async
twins are the accessors' own: the synchronous call on taskstate's thread pool, never on the
event loop (`bench/trigger_loop_lag.py` measured httpx on the loop at twice the heartbeat lag and
a tenth of the calls per second).

An `update` with an update operation (`taskstate.ops`) is one POST to the update route, which
the server applies in one transaction (its write id makes a re-sent copy answer the first new
value). Other atomic updates (`update` with a function, `compare_and_set`) are GET-with-ETag
→ compute → `PUT If-Match` (`If-None-Match: *` to create) → again on 412, so writers on other
machines lose nothing. A lost race is contention, not an outage: it is tried again after a
jittered backoff for as long as the client's retry window (`HttpBackend(retry_window=)`),
counted from the first lost race, and only then `BackendBusyError`. Each attempt carries a
write id (`X-Taskstate-Write-Id`). A server that keeps the write ledger
(docs/api.md, "Write ids") records it with the write, in its transaction: when an attempt's
answer is lost (timeout, reset, a proxy's 502/504), the transport sends the same request again
within the retry window and the server answers with the first outcome — applied once, and
known. An older server keeps the id only with the row: the next read tells whether the write
landed (the row holds the id), and once the key has moved on without it the outcome is
unknown (`OutcomeUnknownError`), never applied again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from taskstate import wire
from taskstate.accessors import AssetStateStore, TaskStateStore, _Accessor, check_limit
from taskstate.backends.backoff import Backoff
from taskstate.backends.http import HttpBackend, Request, json_body
from taskstate.errors import (
    BackendBusyError,
    ConfigError,
    KeyNotFoundError,
    OutcomeUnknownError,
    PreconditionFailedError,
    VersionNotFoundError,
)
from taskstate.history import Version
from taskstate.ops import Op
from taskstate.scope import AssetScope, TaskScope, check_writable
from taskstate.stored import DEFAULT_EXPIRY, KEEP_EXPIRY, Expiry, Page, StoredEntry
from taskstate.values import JsonValue, check_key, check_size, encode_value, expires_at

if TYPE_CHECKING:
    from taskstate.store import StateStore

T = TypeVar("T")
# Between lost races (412: another writer won): decorrelated jitter (`Backoff`) from a few ms
# to a cap — long enough for 64 writers on one key to spread out, short enough that a loser is
# soon back; within a short retry window the cap is a share of it, so it still has attempts.
RACE_FIRST_S = 0.002
RACE_CAP_S = 0.2
RACE_CAP_SHARE = 20


class _Remote(_Accessor):
    """What the task and asset accessors over HTTP share: one route, its query, the wire."""

    def __init__(
        self, store: StateStore, scope: TaskScope | AssetScope, writer: Any = None
    ) -> None:
        super().__init__(store, scope, writer)
        assert isinstance(store.backend, HttpBackend)
        self._http = store.backend.http
        if isinstance(scope, TaskScope):
            self._path = wire.task_path(scope)
            self._history_path = wire.task_path(scope, wire.TASK_HISTORY)
            self._update_path = wire.task_path(scope, wire.TASK_UPDATE)
            self._query: dict[str, Any] = {wire.MAP_INDEX: scope.map_index}
            self._items = wire.TASK_ITEMS
        else:
            self._path = wire.ASSET_STATE
            self._history_path = wire.ASSET_HISTORY
            self._update_path = wire.ASSET_UPDATE
            self._query = {wire.NAME: scope.identity}
            self._items = wire.ASSET_ITEMS

    # -- requests (data, so the sync and async paths share them) ---------------------------

    def _get_request(self, key: str) -> Request:
        check_key(key)
        return Request("GET", wire.key_path(self._path, key), self._query)

    def _put_request(
        self, key: str, text: str, fields: dict[str, Any], headers: dict[str, str] | None = None
    ) -> Request:
        idempotent = not headers  # a conditional write's outcome must be resolved by a read
        return Request(
            "PUT",
            wire.key_path(self._path, key),
            self._query,
            json_body(fields, text),
            headers,
            idempotent=idempotent,
        )

    def _delete_request(self, key: str) -> Request:
        check_key(key)
        return Request("DELETE", wire.key_path(self._path, key), self._query)

    def _clear_request(self) -> Request:
        return Request("DELETE", self._path, self._query)

    def _encoded(self, key: str, value: object) -> str:
        check_key(key)
        check_writable(self.scope)
        text = encode_value(value)
        check_size(text, self._limit, key, offload_configured=False)
        if self.hook is not None:
            self.hook.encoded(text)
        return text

    def _expiry_fields(self, retention: object) -> dict[str, Any]:
        return {}

    @staticmethod
    def _entry(response: Any) -> StoredEntry | None:
        if response.status_code == 404:
            return None
        return wire.entry_from_json(response.json(), wire.unquoted(response.headers.get("etag")))

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str, default: Any = None, *, as_of: datetime | None = None) -> Any:
        if as_of is not None:  # the base checks `as_of` (a naive one is refused here)
            return super().get(key, default, as_of=as_of)
        entry = self.entry(key)
        return default if entry is None else entry.value

    def _get_as_of(self, key: str, default: Any, at: float) -> Any:
        check_key(key)
        query = {**self._query, wire.AS_OF: wire.iso(at)}
        request = Request("GET", wire.key_path(self._history_path, key), query)
        try:
            response = self._http.send(request)
        except KeyNotFoundError:  # the key held no value then
            return default
        return response.json()[wire.VALUE]

    # -- history (docs/history.md): the server's store keeps it ----------------------------

    def history(self, key: str, limit: int | None = None) -> list[Version]:
        check_key(key)
        check_limit(limit)
        query = dict(self._query) if limit is None else {**self._query, wire.LIMIT: limit}
        request = Request("GET", wire.key_path(self._history_path, key), query)
        body = self._http.send(request).json()
        return [wire.version_from_json(item) for item in body[wire.VERSIONS]]

    def restore(self, key: str, version: int, *, if_match: str | None = None) -> Version:
        check_key(key)
        check_writable(self.scope)
        if not isinstance(version, int) or not 1 <= version < 1 << 63:
            raise VersionNotFoundError(
                f"{key!r} in {self.scope} has no version {version!r}; history(key) lists the kept "
                "ones"
            )
        headers = None if if_match is None else {wire.IF_MATCH: wire.quoted(if_match)}
        body = json_body({wire.VERSION: version})
        path = wire.key_path(self._history_path, key)
        # Not resent on its own: a second restore would be a second version.
        request = Request("POST", path, self._query, body, headers, idempotent=False)
        return wire.version_from_json(self._http.send(request).json())

    def entry(self, key: str) -> StoredEntry | None:
        try:
            return self._entry(self._http.send(self._get_request(key)))
        except KeyNotFoundError:
            return None

    def page(
        self, *, limit: int = 50, offset: int = 0, key_prefix: str = "", exact_total: bool = False
    ) -> Page[StoredEntry]:
        items: list[StoredEntry] = []
        while True:
            want = min(limit - len(items), wire.MAX_PAGE)
            query = {**self._query, wire.LIMIT: max(want, 0), wire.OFFSET: offset + len(items)}
            if key_prefix:
                query[wire.KEY_PREFIX] = key_prefix
            if exact_total:
                query[wire.EXACT_TOTAL] = "true"
            body = self._http.send(Request("GET", self._path, query)).json()
            got = [wire.entry_from_json(item) for item in body[self._items]]
            items.extend(got)
            total = int(body[wire.TOTAL])
            if not got or len(items) >= limit or offset + len(items) >= total:
                # A server that does not say counted exactly (Airflow's API always does).
                return Page(items, total, bool(body.get(wire.EXACT_TOTAL, True)))

    def _all(self) -> list[StoredEntry]:
        return self.page(limit=1 << 62).items

    def keys(self) -> list[str]:
        return [entry.key for entry in self._all()]

    def items(self) -> list[tuple[str, Any]]:
        return [(entry.key, entry.value) for entry in self._all()]

    # -- writing --------------------------------------------------------------------------

    def _set(self, key: str, value: object, retention: object) -> None:
        text = self._encoded(key, value)
        self._http.send(self._put_request(key, text, self._expiry_fields(retention)))

    def write(
        self,
        key: str,
        value: object,
        *,
        expires_at: float | Expiry | None = DEFAULT_EXPIRY,
        if_match: str | None = None,
        if_none_match: bool = False,
        must_exist: bool = False,
        op: str = "set",
        write_id: str | None = None,
    ) -> StoredEntry:
        """Write with an absolute expiry and optional preconditions (import, migration);
        `write_id` is sent as the request's `X-Taskstate-Write-Id`."""
        text = self._encoded(key, value)
        if expires_at is KEEP_EXPIRY or must_exist:
            current = self.entry(key)
            if current is None:
                raise KeyNotFoundError(f"no key {key!r} in {self.scope}")
            if_match = if_match or current.etag
            if expires_at is KEEP_EXPIRY:
                expires_at = current.expires_at
        fields: dict[str, Any] = {}
        if isinstance(self.scope, TaskScope) and not isinstance(expires_at, Expiry):
            fields[wire.EXPIRES_AT] = wire.iso(expires_at)
        headers = {}
        if if_match is not None:
            headers[wire.IF_MATCH] = wire.quoted(if_match)
        if if_none_match:
            headers[wire.IF_NONE_MATCH] = "*"
        if write_id is not None:
            headers[wire.WRITE_ID_HEADER] = write_id
        response = self._http.send(self._put_request(key, text, fields, headers or None))
        return StoredEntry(
            key,
            value,
            time.time(),
            None if isinstance(expires_at, Expiry) else expires_at,
            None,
            wire.unquoted(response.headers.get("etag")) or "",
        )

    def delete(self, key: str) -> None:
        self._http.send(self._delete_request(key))

    def _update(
        self,
        key: str,
        fn: Callable[[Any], Any],
        default: Any,
        retention: object,
        write_id: str | None = None,
    ) -> Any:
        """An update operation (`taskstate.ops`) goes as data in one request, applied by the
        server in one transaction; any other function, optimistically (`_atomic`). A server
        without the update route (an older one) gets the optimistic path from then on."""
        if not isinstance(fn, Op) or not self._http.update_route:
            return super()._update(key, fn, default, retention)
        check_key(key)
        check_writable(self.scope)
        if default is not None:
            encode_value(default)  # the value rules, before a round trip
        fields = {wire.OP: fn.name, wire.VALUE: fn.operand, wire.DEFAULT: default}
        request = Request(
            "POST",
            wire.key_path(self._update_path, key),
            self._query,
            json_body({**fields, **self._expiry_fields(retention)}),
            # Re-sent as it is after a lost answer to a server that keeps the write ledger.
            {wire.WRITE_ID_HEADER: uuid.uuid4().hex},
            idempotent=False,
        )
        try:
            answer = self._http.send(request).json()
        except ConfigError as exc:
            if wire.NOT_A_ROUTE not in str(exc):
                raise
            self._http.update_route = False
            return super()._update(key, fn, default, retention)
        if wire.VALUE not in answer:  # the id recorded by another kind of write
            raise OutcomeUnknownError(
                f"the taskstate server at {self._http.host}: {fn!r} on {key!r} in {self.scope} "
                "was answered as a write already applied under its write id, without the "
                "value it wrote, so its new value is unknown; it was not applied again: read "
                "the key"
            )
        return answer[wire.VALUE]

    def clear(self) -> None:
        self._http.send(self._clear_request())

    def _atomic(
        self,
        key: str,
        decide: Callable[[bool, Any], tuple[str | None, T]],
        retention: object,
        op: str,
        write_id: str | None = None,
    ) -> T:
        """GET-with-ETag → decide → conditional PUT, again on 412. A lost answer is resolved
        by the server's write ledger (the transport re-sends the PUT with its id), or from an
        older server by the write id the next read shows. (`write_id`: None; each attempt
        makes its own.)"""
        fields = self._expiry_fields(retention)
        base = uuid.uuid4().hex
        results: dict[str, T] = {}
        # The version a write whose answer was lost was conditioned on ("" = absent). Until
        # the key leaves that version, the lost write has not landed (it may still: then it
        # is the only one of ours that can, as every later attempt is conditioned on it too).
        # Once it has left it without our write id, ours may have landed and been overwritten
        # since: nothing can tell, so it is not applied again.
        lost: str | None = None
        why = ""  # how that answer was lost
        backoff: Backoff | None = None  # made at the first lost race: none on the fast path
        attempt = 0
        while True:
            current = self.entry(key)
            mine = _write_id(current)
            if mine in results:  # a write whose answer was lost did land
                return results[mine]
            if lost is not None and (current.etag if current is not None else "") != lost:
                raise OutcomeUnknownError(
                    f"the taskstate server at {self._http.host}: a write to {key!r} in "
                    f"{self.scope} was sent and its answer lost ({why}), and another writer "
                    "changed the key before it could be read back, so whether it landed is "
                    "unknown. It was not applied again: read the key to see"
                )
            text, result = decide(current is not None, None if current is None else current.value)
            if text is None:
                return result
            write_id = f"{base}-{attempt}"
            attempt += 1
            headers = {wire.WRITE_ID_HEADER: write_id, wire.OP_HEADER: op}
            if current is None:
                headers[wire.IF_NONE_MATCH] = "*"
            else:
                headers[wire.IF_MATCH] = wire.quoted(current.etag)
            results[write_id] = result
            try:
                self._http.send(self._put_request(key, text, fields, headers))
                return result
            except PreconditionFailedError:
                if self.hook is not None:
                    self.hook.retried()
            except OutcomeUnknownError as exc:
                if self._http.ledger:
                    raise  # re-sent with its id for the whole retry window: still no answer
                if lost is None:
                    lost = current.etag if current is not None else ""
                    why = str(exc)
            # Lost the race (or the answer): again after a pause, within the retry window.
            if backoff is None:
                window = self._http.retry_window
                cap = min(RACE_CAP_S, window / RACE_CAP_SHARE)
                backoff = Backoff(window, first_s=min(RACE_FIRST_S, cap), cap_s=cap, jitter=True)
            if not backoff.pause():
                raise BackendBusyError(
                    f"the taskstate server at {self._http.host}: key {key!r} in {self.scope} "
                    f"was changed by other writers under each of {attempt} attempts to {op} it "
                    f"over {backoff.elapsed():.1f} s (the retry window, "
                    f"{self._http.retry_window:g} s); nothing was written by this call. Too "
                    "many writers on one key: try again later, or spread them over keys"
                )


def _write_id(entry: StoredEntry | None) -> str | None:
    writer = None if entry is None else entry.updated_by
    return writer.get(wire.WRITE_ID) if isinstance(writer, dict) else None


class RemoteTaskState(_Remote, TaskStateStore):
    """`TaskStateStore` over HTTP."""

    def _expiry_fields(self, retention: object) -> dict[str, Any]:
        # The retention, not an instant: the server's clock decides when it runs out.
        after = expires_at(retention, self._default_days, 0.0)
        return {wire.EXPIRES_IN: after} if after is not None else {wire.EXPIRES_AT: None}

    def clear(self, *, all_map_indices: bool = False) -> None:
        """As `TaskStateStore.clear`, on the server; `all_map_indices`: every map index."""
        if not all_map_indices:
            super().clear()
            return
        self._http.send(Request("DELETE", self._path, {wire.ALL_MAP_INDICES: "true"}))


class RemoteAssetState(_Remote, AssetStateStore):
    """`AssetStateStore` over HTTP (asset state never expires)."""


class RemoteMeta:
    """taskstate's markers of one task instance over HTTP (`MetaState`'s calls)."""

    def __init__(self, store: StateStore, scope: TaskScope) -> None:
        assert isinstance(store.backend, HttpBackend)
        self._http = store.backend.http
        self._path = wire.task_path(scope, wire.TASK_META)
        self._query = {wire.MAP_INDEX: scope.map_index}

    def get(self, key: str) -> Any:
        """As `MetaState.get`, on the server: one marker's value, or None."""
        try:
            response = self._http.send(Request("GET", wire.key_path(self._path, key), self._query))
        except KeyNotFoundError:
            return None
        return response.json()[wire.VALUE]

    def set(
        self, key: str, value: JsonValue, *, until: float | Expiry | None = DEFAULT_EXPIRY
    ) -> None:
        """`until` is the server's to decide (its default retention)."""
        request = Request(
            "PUT", wire.key_path(self._path, key), self._query, json_body({}, encode_value(value))
        )
        self._http.send(request)

    def clear(self) -> None:
        """As `MetaState.clear`, on the server: every marker of the task instance."""
        self._http.send(Request("DELETE", self._path, self._query))
