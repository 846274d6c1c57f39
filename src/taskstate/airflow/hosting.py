"""Hosting taskstate's HTTP API inside Airflow, in one place: whether this Airflow serves it
(`api_served`, and doctor's line about it), and what the host adds to the API app
(`airflow_hosting`): from Airflow's metadata database, whether a task instance exists (a write
to one that does not is 404, as in Airflow 3.3), which asset an Airflow asset id (dataset id on
2.x) names, and which try of a task instance is live (fencing stale tries).

Whether the API is served never imports Airflow or FastAPI (schedulers and workers load the
plugin too); the lookups import Airflow when called, in the api-server / webserver, which
holds the metadata database. Which plugin attribute carries the app is the version's
`Capabilities.api_plugin` (`taskstate.airflow.plugin`); the app itself is built by
`taskstate.airflow.webserver` (Airflow 2) and `taskstate.airflow.api_server` (Airflow 3).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import TYPE_CHECKING, Any

from taskstate.airflow.versions import installed, native_store_active
from taskstate.scope import AssetScope

if TYPE_CHECKING:
    from taskstate.api.context import Hosting

# -- whether the API is served here ---------------------------------------------------------

PLUGIN = "taskstate.airflow.plugin:TaskStatePlugin"


def api_served() -> bool:
    """Whether taskstate's HTTP API is served inside this Airflow: on 2.10–3.2 always; on 3.3+
    only when `[state_store] taskstate_mode = taskstate` keeps taskstate in charge (the upgrade
    path), since Airflow serves its own state-store routes."""
    return not native_store_active()


def doctor_check() -> tuple[str, str, str]:
    """The `taskstate doctor` line for the HTTP API."""
    if not api_served():
        return (
            "http api",
            "ok",
            "not served by taskstate: Airflow 3.3+ serves its own state-store routes "
            "([state_store] taskstate_mode = taskstate keeps taskstate's at /taskstate)",
        )
    plugins = {ep.value for ep in importlib.metadata.entry_points(group="airflow.plugins")}
    if PLUGIN not in plugins:
        return ("http api", "fail", f"the airflow.plugins entry point {PLUGIN} is missing: "
                "reinstall taskstate (pip install 'taskstate[airflow]')")  # fmt: skip
    missing = [m for m in ("fastapi", "jwt", "a2wsgi") if importlib.util.find_spec(m) is None]
    if missing:
        return ("http api", "warn", f"not served: {', '.join(missing)} not installed "
                "(pip install 'taskstate[airflow]')")  # fmt: skip
    return ("http api", "ok", "served by the taskstate plugin at /taskstate on the "
            "api-server (Airflow 3) or webserver (Airflow 2)")  # fmt: skip


# -- fencing stale tries ----------------------------------------------------------------------

# A task instance that deferred is still its try: its trigger (in the triggerer) writes the
# task's state with that try's token until the event resumes the task on a worker, where the
# try number stays the same (Airflow does not count a resume as a new try).
LIVE_STATES = frozenset({"running", "deferred"})


def live_try(state: object, try_number: int) -> int | None:
    """The try number that may write, given a task instance's state and try number: the try
    itself while it runs or is deferred, else None (no try may write)."""
    if state is None or str(getattr(state, "value", state)) not in LIVE_STATES:
        return None
    return int(try_number)


def running_try(dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
    """The try number of the task instance if it is running or deferred, else None."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TaskInstance.state, TaskInstance.try_number).where(
        TaskInstance.dag_id == dag_id,
        TaskInstance.run_id == run_id,
        TaskInstance.task_id == task_id,
        TaskInstance.map_index == map_index,
    )
    with create_session() as session:
        row = session.execute(query).one_or_none()
    return None if row is None else live_try(row[0], row[1])


# -- what the API learns from Airflow's metadata database ------------------------------------


def task_instance_exists(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> bool:
    """`map_index` None: any map index of the task (a clear across all of them)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TI.task_id).where(
        TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id
    )
    if map_index is not None:
        query = query.where(TI.map_index == map_index)
    with create_session() as session:
        return session.scalar(query.limit(1)) is not None


def asset_by_id(asset_id: int) -> AssetScope | None:
    """The asset (Airflow 3) or dataset (Airflow 2) with that id, as taskstate addresses it."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    model: Any
    row = installed()
    if row is not None and row.asset_model == "dataset":  # Airflow 2: known by URI only
        from airflow.models.dataset import DatasetModel

        model = DatasetModel
    else:
        from airflow.models.asset import AssetModel

        model = AssetModel
    with create_session() as session:
        row = session.execute(select(model).where(model.id == asset_id)).scalar_one_or_none()
        if row is None:
            return None
        name = getattr(row, "name", None)
        return AssetScope(name=name or None, uri=row.uri)


def asset_id(asset: AssetScope) -> int | None:
    """Airflow 3's id of the asset that name (and URI) address, preferring an active asset;
    None when Airflow has no such asset or the name alone is ambiguous."""
    from airflow.models.asset import AssetActive, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(AssetModel.id)
    if asset.name:
        query = query.where(AssetModel.name == asset.name)
    if asset.uri:
        query = query.where(AssetModel.uri == asset.uri)
    active = query.join(
        AssetActive, (AssetActive.name == AssetModel.name) & (AssetActive.uri == AssetModel.uri)
    )
    with create_session() as session:
        for candidates in (active, query):
            ids = session.scalars(candidates.limit(2)).all()
            if ids:
                return int(ids[0]) if len(ids) == 1 else None
    return None


def airflow_hosting() -> Hosting:
    """What the plugin adds to the API app inside this Airflow."""
    from taskstate.api.context import Hosting  # FastAPI: only where the API is built

    row = installed()
    return Hosting(
        task_instance_exists=task_instance_exists,
        asset_by_id=asset_by_id,
        running_try=running_try,
        login_url="" if row is None else row.login_url,
    )
