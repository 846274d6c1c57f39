"""Request and response bodies, field for field Airflow 3.3's state-store datamodels.

Request bodies forbid extra fields. `value` is typed `Any` on purpose: the value rules live in
`taskstate.values` (called by the store), so the API reports the same message as the Python
accessor, in FastAPI's 422 shape (`taskstate.api.errors`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskStateBody(_Body):
    """PUT: `expires_at` is `"default"` (`[state_store] default_retention_days`), `null`
    (never) or an aware datetime; or `expires_in`, seconds from the server's clock (what the
    Python client sends, so a worker's clock never decides an expiry)."""

    value: Any = Field(description="Any JSON value except null.")
    expires_at: AwareDatetime | Literal["default"] | None = "default"
    expires_in: float | None = Field(
        default=None, ge=0, description="Seconds from the server's now (not with expires_at)."
    )


class PatchBody(_Body):
    """PATCH: a new value for an existing key; its expiry is kept."""

    value: Any = Field(description="Any JSON value except null.")


class AssetStateBody(_Body):
    """PUT on an asset's key: the new value (asset keys do not expire)."""

    value: Any = Field(description="Any JSON value except null.")


_OPS = Literal["add", "maximum", "minimum", "append"]  # taskstate.ops.NAMES (a test holds them)


class AssetUpdateBody(_Body):
    """POST `.../taskstate-update/{key}`: an update operation (`taskstate.ops`) the server
    applies to the key in one transaction: `op` with its operand `value`, starting from
    `default` when the key is absent."""

    op: _OPS
    value: Any = Field(description="The operand: add's number, maximum's number or string, ...")
    default: Any = Field(default=None, description="The value when the key is absent.")


class TaskUpdateBody(AssetUpdateBody):
    """As the asset's, and the written value's expiry: `expires_in` seconds from the server's
    clock, or `expires_at: null` (never); neither: the default retention."""

    expires_at: Literal["default"] | None = "default"
    expires_in: float | None = Field(
        default=None, ge=0, description="Seconds from the server's now (not with expires_at)."
    )


class UpdateResult(BaseModel):
    """The key's new value. Without `value`: a re-sent copy of an update already applied,
    whose new value the key and its kept history no longer hold."""

    key: str
    value: Any = None


class LastUpdatedBy(BaseModel):
    """Who wrote a key last: a task instance, a watcher, or an API caller (`subject`); `via`
    says which door a person used (`ui`, `cli`, `import`; `taskstate.writers`), `user` their
    operating-system account for `cli`/`import`."""

    kind: Literal["task", "watcher", "api"]
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    subject: str | None = None
    via: str | None = None
    user: str | None = None
    write_id: str | None = Field(
        default=None, description="The writer's id of this write (`X-Taskstate-Write-Id`)."
    )


_TOTAL = "Every match when `exact_total`; else a lower bound, `offset + limit + 1`."
_FOUND = "Every item when `exact_total`; else a lower bound, `offset + limit + 1`."
_EXACT = (
    "False: more follow this page and `total_entries` was not counted to the end (a page "
    "costs O(offset + limit)); a state listing counts them on `exact_total=true`."
)


class TaskStateEntry(BaseModel):
    """One key of a task instance's state, with its expiry and last writer."""

    key: str
    value: Any
    updated_at: datetime
    expires_at: datetime | None
    last_updated_by: LastUpdatedBy | None = None


class TaskStateCollection(BaseModel):
    """A page of a task instance's keys."""

    task_state_store: list[TaskStateEntry]
    total_entries: int = Field(description=_TOTAL)
    exact_total: bool = Field(description=_EXACT)


class AssetStateEntry(BaseModel):
    """One key of an asset's state, with its last writer."""

    key: str
    value: Any
    updated_at: datetime
    last_updated_by: LastUpdatedBy | None = None


class AssetStateCollection(BaseModel):
    """A page of an asset's keys."""

    asset_state_store: list[AssetStateEntry]
    total_entries: int = Field(description=_TOTAL)
    exact_total: bool = Field(description=_EXACT)


class HistoryVersion(BaseModel):
    """One kept version of a key (docs/history.md); `value` is null for a deletion (`delete`,
    `clear`, `expire`)."""

    version: int = Field(description="Grows per key; never reused.")
    value: Any
    op: Literal[
        "set", "update", "compare_and_set", "delete", "clear", "expire", "import", "restore"
    ]
    updated_at: datetime
    expires_at: datetime | None
    updated_by: LastUpdatedBy | None = None


class HistoryCollection(BaseModel):
    """The kept versions of a key."""

    versions: list[HistoryVersion] = Field(description="Newest first.")


class ValueAsOf(BaseModel):
    """`GET .../taskstate-history/{key}?as_of=`: the value the key held at that instant (404
    when it held none, 410 when the version that covered it is no longer kept)."""

    key: str
    value: Any
    as_of: datetime


class RestoreBody(_Body):
    """POST `.../taskstate-history/{key}`: write this kept version back as a new version."""

    version: int = Field(ge=1)


class RestoreTaskBody(_Body):
    """POST on a task instance's `.../taskstate-history`: every key back as it was then."""

    as_of: AwareDatetime


class RestoreTaskResult(BaseModel):
    """How many keys a task-instance restore brought back."""

    restored: int = Field(description="Keys live at as_of, now live again.")


class KeyChange(BaseModel):
    """One key a task-instance restore would change: its value at `as_of` and now."""

    map_index: int
    key: str
    then: Any = Field(description="The value at as_of; null: none (the restore deletes it).")
    now: Any = Field(description="The value now; null: none.")


class RestoreTaskPreview(BaseModel):
    """`GET .../taskstate-history?as_of=`: what `POST` with that instant would change, written
    nowhere (the state pages show it before the person confirms)."""

    as_of: datetime
    restored: int = Field(description="Keys live at as_of: what the restore would answer.")
    changes: list[KeyChange] = Field(
        description="Each key it would bring back or delete, by map index and key."
    )


class DagSummary(BaseModel):
    """A DAG that holds task state, with its number of live keys."""

    dag_id: str
    keys: int = Field(
        description="Live keys across every run, task and map index (10001: more than 10,000)."
    )


class DagCollection(BaseModel):
    """A page of the DAGs that hold task state."""

    dags: list[DagSummary]
    total_entries: int = Field(description=_FOUND)
    exact_total: bool = Field(description=_EXACT)


class DagRunSummary(BaseModel):
    """A run of a DAG that holds task state, with its number of live keys."""

    dag_run_id: str
    keys: int


class DagRunCollection(BaseModel):
    """A page of a DAG's runs that hold task state."""

    dag_runs: list[DagRunSummary]
    total_entries: int = Field(description=_FOUND)
    exact_total: bool = Field(description=_EXACT)


class TaskInstanceSummary(BaseModel):
    """A task instance (task and map index) that holds state, with its number of live keys."""

    task_id: str
    map_index: int
    keys: int


class TaskInstanceCollection(BaseModel):
    """A page of a run's task instances that hold state."""

    task_instances: list[TaskInstanceSummary]
    total_entries: int = Field(description=_FOUND)
    exact_total: bool = Field(description=_EXACT)


class AssetSummary(BaseModel):
    """An asset that holds state, with its number of live keys."""

    name: str = Field(description="The asset's identity: its name, else its uri.")
    keys: int


class AssetCollection(BaseModel):
    """A page of the assets that hold state."""

    assets: list[AssetSummary]
    total_entries: int = Field(description=_FOUND)
    exact_total: bool = Field(description=_EXACT)


class Health(BaseModel):
    """`GET /health`: readiness (`unavailable` with 503 when the store cannot serve);
    `backend` and `version` are shown to admins only."""

    status: Literal["ok", "unavailable"]
    detail: str | None = None
    backend: str | None = Field(
        None, description="The backend's kind and location, without credentials (admins)."
    )
    version: str | None = Field(None, description="taskstate's version (admins).")


def utc(epoch: float) -> datetime:
    """The aware UTC datetime of `epoch` seconds."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc)
