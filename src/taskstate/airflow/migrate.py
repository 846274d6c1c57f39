"""`taskstate migrate-to-airflow`: copy taskstate's state into Airflow 3.3+'s own store.

Run where Airflow 3.3+ is installed and its database is migrated (`airflow db migrate`). Every
write goes through Airflow's configured `[state_store] backend` (`airflow.state.
get_state_backend()`), never through SQL on Airflow's tables; existence checks (DAG run, task
instance, active asset) read Airflow's ORM models.

What is copied: every live task key (value and absolute expiry) and every asset key, offloaded
values resolved. Not copied: expired keys, taskstate's own bookkeeping (re-run markers), keys
whose DAG run, task instance or active asset no longer exists (reported). Airflow stamps
`updated_at` itself, so the copies carry the migration's time.

The rules that make it safe to rerun:
- a key Airflow already holds with the same value is left alone ("unchanged"), so a second
  run changes nothing, and a run killed half-way (SIGKILL included) is finished by the next;
- a key Airflow holds with another value was written natively after the upgrade: it is never
  overwritten, and is reported as a conflict;
- each task instance whose keys are all accounted for gets a marker in taskstate's own
  bookkeeping, which `doctor` and the task log (native mode) use to spot unmigrated DAGs.

`ResumableJobMixin` intent rows (`<external_id_key>__intent`) are ordinary keys of the task and
are copied: `taskstate.ResumableJobMixin` keeps using them on 3.3 to close the submit→persist
window, and Airflow's native mixin ignores them (it reads only `external_id_key`). An intent
without a job id (a try died between submitting and saving the id) is reported, because
Airflow's native mixin would submit such a job again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from taskstate.resumable import INTENT_SUFFIX
from taskstate.scope import ASSET_PREFIX, SEP, TASK_KIND, AssetScope, TaskScope, task_prefix
from taskstate.store import StateStore, StoredEntry

# taskstate's per-task-instance marker (store.meta): every key of the scope was accounted for.
MIGRATED_KEY = "migrated_to_airflow"

# Outcomes of one key, in the order the summary prints them.
COPIED = "copied"
UNCHANGED = "unchanged"
CONFLICT = "conflict"
NO_RUN = "skipped: DAG run gone"
NO_TI = "skipped: task instance gone"
NO_ASSET = "skipped: no active asset"
OUTCOMES = (COPIED, UNCHANGED, CONFLICT, NO_RUN, NO_TI, NO_ASSET)


@dataclass
class Report:
    """What a migration (or a dry run) did, key by key where something needs a reader."""

    counts: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)  # conflicts and skips, one line each
    oversize: list[str] = field(default_factory=list)
    intents: int = 0
    lost_submissions: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)  # --verify

    def as_json(self) -> dict[str, Any]:
        """The report for `--json`: the count of every outcome and each list of notes."""
        return {
            "counts": {o: self.counts[o] for o in OUTCOMES},
            "notes": self.notes,
            "oversize": self.oversize,
            "intent_rows": self.intents,
            "lost_submissions": self.lost_submissions,
            "mismatches": self.mismatches,
        }


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _where(scope: TaskScope | AssetScope, key: str) -> str:
    if isinstance(scope, TaskScope):
        return f"{scope.dag_id}/{scope.run_id}/{scope.task_id}[{scope.map_index}] key {key!r}"
    return f"asset {scope.identity!r} key {key!r}"


class AirflowStore:
    """Airflow 3.3's side: its configured store backend, and existence checks through its ORM."""

    def __init__(self) -> None:
        from airflow.configuration import conf
        from airflow.state import get_state_backend

        self.backend = get_state_backend()
        self.limit = conf.getint("state_store", "max_value_storage_bytes")
        self._runs: dict[tuple[str, str], set[tuple[str, int]] | None] = {}
        self._assets: dict[str, int | None] = {}

    def _task_instances(self, dag_id: str, run_id: str) -> set[tuple[str, int]] | None:
        """(task_id, map_index) of the run's task instances, or None when the run is gone."""
        if (dag_id, run_id) not in self._runs:
            from airflow.models.dagrun import DagRun
            from airflow.models.taskinstance import TaskInstance
            from airflow.utils.session import create_session

            with create_session() as session:
                run = (
                    session.query(DagRun.id)
                    .filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
                    .scalar()
                )
                tis = (
                    session.query(TaskInstance.task_id, TaskInstance.map_index)
                    .filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
                    .all()
                )
            self._runs[(dag_id, run_id)] = None if run is None else {(t, m) for t, m in tis}
        return self._runs[(dag_id, run_id)]

    def missing(self, scope: TaskScope | AssetScope) -> str | None:
        """Why `scope` has no place in Airflow's store (an outcome), or None when it has one."""
        if isinstance(scope, AssetScope):
            return NO_ASSET if self.asset_id(scope) is None else None
        tis = self._task_instances(scope.dag_id, scope.run_id)
        if tis is None:
            return NO_RUN
        return None if (scope.task_id, scope.map_index) in tis else NO_TI

    def asset_id(self, scope: AssetScope) -> int | None:
        """The active asset named (or, for a URI-only scope, addressed) by `scope`."""
        identity = scope.identity
        if identity not in self._assets:
            from airflow.models.asset import AssetActive, AssetModel
            from airflow.utils.session import create_session

            with create_session() as session:
                active = session.query(AssetModel.id).join(
                    AssetActive,
                    (AssetActive.name == AssetModel.name) & (AssetActive.uri == AssetModel.uri),
                )
                found = active.filter(AssetModel.name == identity).scalar()
                if found is None:
                    found = active.filter(AssetModel.uri == identity).scalar()
            self._assets[identity] = found
        return self._assets[identity]

    def native_scope(self, scope: TaskScope | AssetScope) -> Any:
        """`scope` as Airflow's own scope type (an asset's carries its active asset id)."""
        from airflow.state import AssetScope as NativeAsset
        from airflow.state import TaskScope as NativeTask

        if isinstance(scope, TaskScope):
            return NativeTask(scope.dag_id, scope.run_id, scope.task_id, scope.map_index)
        return NativeAsset(asset_id=self.asset_id(scope), name=scope.name, uri=scope.uri)

    def get(self, scope: TaskScope | AssetScope, key: str) -> Any:
        """The value Airflow's store holds for `key`, decoded from JSON, or None."""
        text = self.backend.get(self.native_scope(scope), key)
        return None if text is None else json.loads(text)

    def set(
        self,
        scope: TaskScope | AssetScope,
        key: str,
        text: str,
        *,
        expires_at: float | None = None,
        writer: dict[str, Any] | None = None,
    ) -> None:
        """Write JSON `text` (task keys: absolute expiry; assets: `writer`, when a task's)."""
        native = self.native_scope(scope)
        if isinstance(scope, TaskScope):
            expires = (
                None if expires_at is None else datetime.fromtimestamp(expires_at, tz=timezone.utc)
            )
            self.backend.set(native, key, text, expires_at=expires)
            return
        record = getattr(self.backend, "set_asset_state_store", None)
        if record is not None and writer is not None and writer.get("kind") == "task":
            # Airflow keeps who wrote an asset key; carry taskstate's record of it over (its
            # columns have no try: a task writer's try_number is dropped, docs/upgrade.md).
            from airflow._shared.state import AssetStateStoreWriterKind

            record(
                native,
                key,
                text,
                kind=AssetStateStoreWriterKind.TASK,
                dag_id=writer.get("dag_id"),
                run_id=writer.get("run_id"),
                task_id=writer.get("task_id"),
                map_index=writer.get("map_index", -1),
            )
            return
        self.backend.set(native, key, text)


def scope_prefixes(dag_ids: Iterable[str], include_assets: bool) -> list[str]:
    """The namespaces to migrate: the DAGs' task state (all DAGs when none), and assets."""
    dags = list(dict.fromkeys(dag_ids))
    prefixes = [task_prefix(d) for d in dags] if dags else [TASK_KIND + SEP]
    if include_assets:
        prefixes.append(ASSET_PREFIX)
    return prefixes


def _entries(
    store: StateStore, prefixes: list[str]
) -> Iterator[tuple[TaskScope | AssetScope, StoredEntry]]:
    for prefix in prefixes:
        yield from store.entries(prefix)


def total_keys(store: StateStore, prefixes: list[str]) -> int:
    """How many live keys the namespaces hold: the total for the progress bar."""
    return sum(n for prefix in prefixes for _, n in store.scopes(prefix))


def migrate(
    store: StateStore,
    airflow: AirflowStore,
    prefixes: list[str],
    *,
    dry_run: bool = False,
    on_key: Callable[[], None] = lambda: None,
) -> Report:
    """Copy live state into Airflow's store; see the module docstring for the rules."""
    report = Report()
    # Task scope -> when its last key expires (None: never), so its marker lives as long as
    # the state it vouches for: `doctor` must not call a long-lived task instance unmigrated.
    seen: dict[TaskScope, float | None] = {}
    for scope, entry in _entries(store, prefixes):
        report.counts[_one(airflow, scope, entry, report, dry_run)] += 1
        if isinstance(scope, TaskScope):
            last = seen.get(scope, 0.0)
            seen[scope] = (
                None if last is None or entry.expires_at is None else max(last, entry.expires_at)
            )
        on_key()
    if not dry_run:
        # Every key of these task instances is accounted for (copied, already there, a
        # conflict reported, or its run gone). Written last: a killed run marks nothing.
        for task_scope, until in seen.items():
            store.meta(task_scope).set(MIGRATED_KEY, store.clock(), until=until)
    return report


def _one(
    airflow: AirflowStore,
    scope: TaskScope | AssetScope,
    entry: StoredEntry,
    report: Report,
    dry_run: bool,
) -> str:
    where = _where(scope, entry.key)
    gone = airflow.missing(scope)
    if gone is not None:
        report.notes.append(f"{gone}: {where}")
        return gone
    if isinstance(scope, TaskScope) and entry.key.endswith(INTENT_SUFFIX):
        report.intents += 1
        if isinstance(entry.value, dict) and "external_id" not in entry.value:
            report.lost_submissions.append(where)
    text = json.dumps(entry.value, ensure_ascii=False)
    native = airflow.get(scope, entry.key)
    if native is not None:
        if _canonical(native) == _canonical(entry.value):
            return UNCHANGED
        report.notes.append(f"{CONFLICT}: {where} was written in Airflow's store since; kept")
        return CONFLICT
    if airflow.limit > 0 and len(text.encode("utf-8")) > airflow.limit:
        report.oversize.append(
            f"{where}: {len(text.encode('utf-8'))} bytes > [state_store] "
            f"max_value_storage_bytes = {airflow.limit} (Airflow's REST API would refuse it; "
            "its workers accept it)"
        )
    if not dry_run:
        airflow.set(scope, entry.key, text, expires_at=entry.expires_at, writer=entry.updated_by)
    return COPIED


def verify(
    store: StateStore,
    airflow: AirflowStore,
    prefixes: list[str],
    *,
    on_key: Callable[[], None] = lambda: None,
) -> list[str]:
    """Every live taskstate key whose scope Airflow still has, compared with Airflow's copy."""
    mismatches = []
    for scope, entry in _entries(store, prefixes):
        on_key()
        if airflow.missing(scope) is not None:
            continue
        native = airflow.get(scope, entry.key)
        if native is None:
            mismatches.append(f"missing in Airflow's store: {_where(scope, entry.key)}")
        elif _canonical(native) != _canonical(entry.value):
            mismatches.append(f"different in Airflow's store: {_where(scope, entry.key)}")
    return mismatches


def unmigrated_scopes(store: StateStore, prefix: str) -> Iterator[TaskScope]:
    """Task scopes under `prefix` holding live state that was never migrated."""
    for scope, _ in store.scopes(prefix):
        if isinstance(scope, TaskScope) and store.meta(scope).get(MIGRATED_KEY) is None:
            yield scope


def unmigrated_dags(store: StateStore) -> Counter[str]:
    """DAG id -> how many of its task instances hold state that was never migrated."""
    return Counter(scope.dag_id for scope in unmigrated_scopes(store, TASK_KIND + SEP))


def unmigrated_summary(dag_id: str) -> str | None:
    """One line for the task log when `dag_id` has unmigrated taskstate state, else None.

    Opens the configured store only when it already exists (a 3.3 deployment that never used
    taskstate must not grow an empty SQLite file).
    """
    store = open_existing_store()
    if store is None:
        return None
    with store:
        first = next(unmigrated_scopes(store, task_prefix(dag_id)), None)
    if first is None:
        return None
    return (
        f"taskstate's store holds state of DAG {dag_id!r} that was never copied into Airflow's "
        f"own store (e.g. run {first.run_id!r}, task {first.task_id!r}); this task reads "
        f"Airflow's. Run `taskstate migrate-to-airflow --dag-id {dag_id}` (or set "
        "[state_store] taskstate_mode = taskstate to keep using taskstate's)"
    )


def open_existing_store() -> StateStore | None:
    """The configured taskstate store, or None when it is an SQLite file that does not exist."""
    from pathlib import Path

    from taskstate.backends import resolve_url
    from taskstate.settings import Settings

    settings = Settings.load()
    if not settings.uses_builtin_backend:
        return StateStore(settings=settings)
    url = resolve_url(settings)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        return None
    return StateStore(url, settings=settings)
