"""The HTTP API's wire, in one place: route paths, field and header names, an entry ⇄ its JSON,
and which HTTP status (and `X-Taskstate-Error` header) each typed error travels as.

The server's routes (`taskstate.api`), the HTTP client (`taskstate.remote`) and the UI's
`app.js` (checked by a test) all speak it; nothing here imports FastAPI or an HTTP client.

Errors: the server answers every error it raises on purpose with the error's class name in
`X-Taskstate-Error`, so the client raises the same class the server's store raised. A 404
without it is not "no such key" but "no such route" (a wrong base URL), and a response that is
not JSON from this API (an SSO login page) is not success.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from taskstate import errors
from taskstate.history import Version, instant
from taskstate.scope import TaskScope
from taskstate.stored import StoredEntry

if TYPE_CHECKING:
    from taskstate.backends.base import Row

# -- routes (relative to the API's base URL, e.g. http://host:8080/taskstate) ----------------

HEALTH: Final = "/health"
DAGS: Final = "/api/v2/dags"
DAG_RUNS: Final = DAGS + "/{dag_id}/dagRuns"
TASK_INSTANCES: Final = DAG_RUNS + "/{dag_run_id}/taskInstances"
TASK_STATE: Final = TASK_INSTANCES + "/{task_id}/state-store"
TASK_META: Final = TASK_INSTANCES + "/{task_id}/taskstate-meta"
ASSETS: Final = "/api/v2/assets"
ASSET_STATE: Final = ASSETS + "/state-store"  # ?name=N (or ?uri=U)
ASSET_STATE_BY_ID: Final = ASSETS + "/{asset_id}/state-store"  # inside Airflow only
# State history (docs/history.md): taskstate's own segment, so no Airflow `{key:path}` route
# can match it. GET .../{key}: the kept versions (`?as_of=`: the value then); POST .../{key}:
# restore a version; POST on a task's collection: restore the task instance as of an instant.
TASK_HISTORY: Final = TASK_INSTANCES + "/{task_id}/taskstate-history"
ASSET_HISTORY: Final = ASSETS + "/taskstate-history"  # ?name=N (or ?uri=U)
ASSET_HISTORY_BY_ID: Final = ASSETS + "/{asset_id}/taskstate-history"  # inside Airflow only
# Update operations (taskstate.ops, docs/api.md): POST .../{key} with the operation as data,
# applied by the server in one request; taskstate's own segment, as history's.
TASK_UPDATE: Final = TASK_INSTANCES + "/{task_id}/taskstate-update"
ASSET_UPDATE: Final = ASSETS + "/taskstate-update"  # ?name=N (or ?uri=U)
ASSET_UPDATE_BY_ID: Final = ASSETS + "/{asset_id}/taskstate-update"  # inside Airflow only
UI_ACCESS: Final = "/ui/access"

# -- fields: query parameters, bodies, collections -------------------------------------------

MAP_INDEX: Final = "map_index"
ALL_MAP_INDICES: Final = "all_map_indices"
LIMIT: Final = "limit"
OFFSET: Final = "offset"
KEY_PREFIX: Final = "key_prefix"
NAME: Final = "name"
URI: Final = "uri"

KEY: Final = "key"
VALUE: Final = "value"
UPDATED_AT: Final = "updated_at"
EXPIRES_AT: Final = "expires_at"
EXPIRES_IN: Final = "expires_in"  # seconds from the server's now (the worker's retention)
LAST_UPDATED_BY: Final = "last_updated_by"
WRITE_ID: Final = "write_id"  # inside last_updated_by: the client's id of its write
TOTAL: Final = "total_entries"
# A listing's `total_entries` is exact, or (false) a lower bound: more keys follow the page. As
# a query parameter (`true`), it asks for an exact count (O(keys), not O(page)).
EXACT_TOTAL: Final = "exact_total"
TASK_ITEMS: Final = "task_state_store"
ASSET_ITEMS: Final = "asset_state_store"
DETAIL: Final = "detail"
AS_OF: Final = "as_of"  # an ISO 8601 instant with its offset
VERSION: Final = "version"
VERSIONS: Final = "versions"
OP: Final = "op"
DEFAULT: Final = "default"  # an update operation's starting value when the key is absent
UPDATED_BY: Final = "updated_by"  # a version's writer: the same dict as last_updated_by
RESTORED: Final = "restored"  # how many keys a task instance's restore made live again
# What that restore would change (its preview): per key, its value at as_of and now (null: none).
CHANGES: Final = "changes"
THEN: Final = "then"
NOW: Final = "now"
HISTORY_FIELDS: Final = frozenset(
    {AS_OF, VERSION, VERSIONS, OP, UPDATED_BY, RESTORED, CHANGES, THEN, NOW}
)
MAX_PAGE: Final = 100  # Airflow's default [api] maximum_page_limit
# Discovery listings (`DAGS`, `DAG_RUNS`, `TASK_INSTANCES`, `ASSETS`) and the writer's identity.
DAG_ID_PATTERN: Final = "dag_id_pattern"  # the DAG search, as Airflow's own parameter
DISCOVERY_FIELDS: Final = frozenset(
    {"dags", "dag_id", "dag_runs", "dag_run_id", "task_instances", "task_id", "assets", "keys"}
    | {DAG_ID_PATTERN}
)
WRITER_FIELDS: Final = frozenset(
    {"kind", "dag_id", "run_id", "task_id", MAP_INDEX, "try_number", "subject", "via", "user"}
    | {WRITE_ID}
)
HEALTH_FIELDS: Final = frozenset({"status", "backend", "version"})
FIELDS: Final = frozenset(
    {MAP_INDEX, ALL_MAP_INDICES, LIMIT, OFFSET, KEY_PREFIX, NAME, URI, KEY, VALUE, UPDATED_AT}
    | {EXPIRES_AT, EXPIRES_IN, LAST_UPDATED_BY, TOTAL, EXACT_TOTAL, TASK_ITEMS, ASSET_ITEMS}
    | {DETAIL}
    | DISCOVERY_FIELDS
    | WRITER_FIELDS
    | HEALTH_FIELDS
    | HISTORY_FIELDS
    | {DEFAULT}
)
"""Every name the API's bodies and query strings use (a test holds models.py and app.js to it)."""
ROUTES: Final = (
    *(HEALTH, DAGS, DAG_RUNS, TASK_INSTANCES, TASK_STATE, TASK_META),
    *(ASSETS, ASSET_STATE, ASSET_STATE_BY_ID, UI_ACCESS),
    *(TASK_HISTORY, ASSET_HISTORY, ASSET_HISTORY_BY_ID),
    *(TASK_UPDATE, ASSET_UPDATE, ASSET_UPDATE_BY_ID),
)
ROUTES_WITH_KEYS: Final = (
    *(TASK_STATE, TASK_META, ASSET_STATE, ASSET_STATE_BY_ID),
    *(TASK_HISTORY, ASSET_HISTORY, ASSET_HISTORY_BY_ID),
    *(TASK_UPDATE, ASSET_UPDATE, ASSET_UPDATE_BY_ID),
)

# -- headers ---------------------------------------------------------------------------------

ETAG: Final = "ETag"
IF_MATCH: Final = "If-Match"
IF_NONE_MATCH: Final = "If-None-Match"
ERROR_HEADER: Final = "X-Taskstate-Error"
WRITE_ID_HEADER: Final = "X-Taskstate-Write-Id"
# On every state route's answer from a server whose store keeps the write ledger (docs/api.md,
# "Write ids"): a conditional write re-sent with its write id is answered with the first
# one's outcome, so the client may re-send one whose answer it lost.
WRITE_IDS_HEADER: Final = "X-Taskstate-Write-Ids"
WRITE_IDS_RECORDED: Final = "recorded"
MAX_WRITE_ID: Final = 64  # characters
VIA_HEADER: Final = "X-Taskstate-Via"  # "ui" from the state pages (writers.api_writer)
# On a conditional PUT from the client's `update` / `compare_and_set`: the operation its
# history version records (any other value, or none, records `set`).
OP_HEADER: Final = "X-Taskstate-Op"
ATOMIC_OPS: Final = frozenset({"update", "compare_and_set"})
JSON_TYPE: Final = "application/json"


def segment(text: str) -> str:
    """One path segment: every reserved character escaped (a `/` in an id or key is data),
    and `.` / `..` spelled `%2E` so no URL layer removes them as dot segments."""
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="")


def task_path(scope: TaskScope, template: str = TASK_STATE) -> str:
    """The task-instance route of `scope` (`TASK_STATE` or `TASK_META`), ids escaped."""
    return template.format(
        dag_id=segment(scope.dag_id),
        dag_run_id=segment(scope.run_id),
        task_id=segment(scope.task_id),
    )


def key_path(collection: str, key: str) -> str:
    """The route of `key` in `collection`, the key escaped as one path segment."""
    return f"{collection}/{segment(key)}"


def quoted(etag: str) -> str:
    """`etag` in double quotes, as an `ETag` / `If-Match` header carries it."""
    return f'"{etag}"'


def unquoted(header: str | None) -> str | None:
    """The bare ETag of a header value: quotes and any weak `W/` prefix removed, None kept."""
    return None if header is None else header.removeprefix("W/").strip('"')


# -- entries ---------------------------------------------------------------------------------


def iso(epoch: float | None) -> str | None:
    """The datetime format pydantic (and so Airflow's API) writes: UTC with a `Z`."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def epoch(text: str | None) -> float | None:
    """The epoch seconds of an `iso` datetime (a trailing `Z` read as UTC); None kept."""
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def task_entry(entry: StoredEntry) -> dict[str, Any]:
    """A task key as the API shows it."""
    return {
        KEY: entry.key,
        VALUE: entry.value,
        UPDATED_AT: iso(entry.updated_at),
        EXPIRES_AT: iso(entry.expires_at),
        LAST_UPDATED_BY: entry.updated_by,
    }


def asset_entry(entry: StoredEntry) -> dict[str, Any]:
    """An asset key as the API shows it (asset state never expires)."""
    return {
        KEY: entry.key,
        VALUE: entry.value,
        UPDATED_AT: iso(entry.updated_at),
        LAST_UPDATED_BY: entry.updated_by,
    }


def entry_json(row: Row, *, expiry: bool) -> bytes:
    """`task_entry` (`expiry`) or `asset_entry` of a row whose value is stored inline, as the
    JSON the API answers. The row's value and writer are already compact JSON text (the store
    encoded them), so they go in as they are, not decoded and encoded again (the hot GET)."""
    parts = [f'{{"{KEY}":', _json_text(row.key), f',"{VALUE}":', row.value,
             f',"{UPDATED_AT}":', _iso_json(row.updated_at)]  # fmt: skip
    if expiry:
        parts += [f',"{EXPIRES_AT}":', _iso_json(row.expires_at)]
    parts += [f',"{LAST_UPDATED_BY}":', row.updated_by or "null", "}"]
    return "".join(parts).encode("utf-8")


def _iso_json(epoch: float | None) -> str:
    text = iso(epoch)
    return "null" if text is None else f'"{text}"'  # digits, '-', ':', '.', 'T', 'Z' only


_json_text = json.JSONEncoder(ensure_ascii=False).encode  # as the API's encoder writes text


def entry_from_json(item: Mapping[str, Any], etag: str | None = None) -> StoredEntry:
    """The inverse of `task_entry` / `asset_entry` (a listing's items carry no ETag)."""
    updated_at = epoch(item[UPDATED_AT])
    return StoredEntry(
        key=item[KEY],
        value=item[VALUE],
        updated_at=0.0 if updated_at is None else updated_at,
        expires_at=epoch(item.get(EXPIRES_AT)),
        updated_by=item.get(LAST_UPDATED_BY),
        etag=etag or "",
    )


def version_json(version: Version) -> dict[str, Any]:
    """A kept version as the API shows it."""
    return {
        VERSION: version.version,
        VALUE: version.value,
        OP: version.op,
        UPDATED_AT: _iso_datetime(version.updated_at),
        EXPIRES_AT: _iso_datetime(version.expires_at),
        UPDATED_BY: version.updated_by,
    }


def version_from_json(item: Mapping[str, Any]) -> Version:
    """The inverse of `version_json`."""
    updated_at = _datetime(item[UPDATED_AT])
    assert updated_at is not None
    return Version(
        version=int(item[VERSION]),
        value=item[VALUE],
        op=item[OP],
        updated_at=updated_at,
        updated_by=item.get(UPDATED_BY),
        expires_at=_datetime(item.get(EXPIRES_AT)),
    )


def _iso_datetime(when: datetime | None) -> str | None:
    return None if when is None else iso(when.timestamp())


def _datetime(text: str | None) -> datetime | None:
    seconds = epoch(text)
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


def instant_text(when: datetime) -> str:
    """An aware instant as `?as_of=` / a restore body carries it (UTC, `Z`)."""
    text = iso(instant(when))
    assert text is not None
    return text


def parse_instant(text: str) -> datetime:
    """`?as_of=` / a body's `as_of` -> an aware datetime; without an offset it is refused
    (`NaiveDatetimeError`, 422), as the Python API refuses a naive datetime."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise errors.NaiveDatetimeError(
            f"as_of must be an ISO 8601 instant with its offset (e.g. 2026-01-31T12:00:00Z), "
            f"got {text[:40]!r}"
        ) from None
    instant(when)  # the same refusal as the Python API for one without an offset
    return when


# -- errors ----------------------------------------------------------------------------------

# Every typed error the server raises on purpose: its status, and for bad input where in the
# request it came from (FastAPI's 422 `loc`). Subclasses first: the first match wins.
ERRORS: Final[tuple[tuple[type[errors.TaskStateError], int, tuple[str, ...] | None], ...]] = (
    (errors.ValueTooLargeError, 422, ("body", "value")),
    (errors.KeyTypeError, 422, ("path", "key")),
    (errors.InvalidKeyError, 422, ("path", "key")),
    (errors.InvalidScopeError, 422, ("path",)),
    (errors.InvalidRetentionError, 422, ("body", EXPIRES_AT)),
    (errors.InvalidValueError, 422, ("body", "value")),
    (errors.UnsupportedValueTypeError, 422, ("body", "value")),
    (errors.UpdateOperationError, 422, ("body", OP)),
    (errors.NaiveDatetimeError, 422, ("query", AS_OF)),
    (errors.KeyNotFoundError, 404, None),
    (errors.VersionNotFoundError, 404, None),
    # Pruned (or history off): no value to give rather than a wrong one.
    (errors.HistoryUnavailableError, 410, None),
    (errors.PreconditionFailedError, 412, None),
    (errors.InvalidTokenError, 401, None),
    (errors.StaleTryError, 409, None),
    # Before its parent: 503 says "certainly not applied, send again"; a lost COMMIT may have
    # landed, so it is a 500 the client never resends (it re-reads the write id instead).
    (errors.OutcomeUnknownError, 500, None),
    (errors.BackendUnavailableError, 503, None),
    (errors.BackendBusyError, 503, None),
    (errors.TaskStateError, 500, None),
)
_BY_NAME: Final = {kind.__name__: kind for kind, _, _ in ERRORS}


def error_status(exc: errors.TaskStateError) -> tuple[int, tuple[str, ...] | None]:
    """The status a typed error answers with, and its `loc` when it is bad input (422)."""
    for kind, status, loc in ERRORS:
        if isinstance(exc, kind):
            return status, loc
    return 500, None  # pragma: no cover - TaskStateError closes the table


def error_headers(exc: BaseException) -> dict[str, str]:
    """The header that names the error's class for the client."""
    name = type(exc).__name__
    kind = next((k for k, _, _ in ERRORS if isinstance(exc, k)), errors.TaskStateError)
    return {ERROR_HEADER: name if name in _BY_NAME else kind.__name__}


def detail_text(body: Any) -> str:
    """The message of an error body: `{"detail": "..."}` or FastAPI's 422 list."""
    detail = body.get(DETAIL) if isinstance(body, dict) else body
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)


# What a 404 from no route at all says (a wrong base URL, or a server older than a route).
NOT_A_ROUTE: Final = "is not a route of the taskstate API"


def error_from_response(
    status: int, error_name: str | None, body: Any, where: str
) -> errors.TaskStateError:
    """The typed error for a refusal. `error_name` is the `X-Taskstate-Error` header (None
    when absent), `body` the decoded JSON (or the text), `where` the server and route."""
    detail = detail_text(body)
    kind = _BY_NAME.get(error_name or "")
    if status in (401, 403):
        return errors.AccessDeniedError(
            f"the taskstate server at {where} refused this request ({status}: {detail}); check "
            "[state_store] taskstate_token (or taskstate_secret_key) on this machine"
        )
    if status == 413:  # the body limit, before any route ran: the same error as the store's
        return errors.ValueTooLargeError(f"the taskstate server at {where}: {detail}")
    if kind is not None and kind is not errors.TaskStateError:
        return kind(detail)
    if status == 404:
        return errors.ConfigError(
            f"{where} {NOT_A_ROUTE} ({status}: {detail}); check "
            "[state_store] taskstate_url (http(s)://host[:port]/taskstate)"
        )
    if status == 409:
        return errors.StaleTryError(f"the taskstate server at {where} refused the write: {detail}")
    if status == 412:
        return errors.PreconditionFailedError(detail)
    if status == 422:
        return errors.InvalidValueError(detail)
    if status in (408, 429, 502, 503, 504):
        return errors.BackendUnavailableError(
            f"the taskstate server at {where} is unavailable ({status}: {detail})"
        )
    return errors.BackendError(f"the taskstate server at {where} answered {status}: {detail}")
