"""What the HTTP API learns from Airflow's metadata database when the plugin hosts it:
whether a task instance exists (a write to one that does not is 404, as in Airflow 3.3) and
which asset an Airflow asset id (dataset id on 2.x) names."""

from __future__ import annotations

from typing import Any

from taskstate.airflow.versions import installed
from taskstate.api.context import Hosting
from taskstate.scope import AssetScope


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
    from taskstate.airflow.fencing import running_try

    row = installed()
    return Hosting(
        task_instance_exists=task_instance_exists,
        asset_by_id=asset_by_id,
        running_try=running_try,
        login_url="" if row is None else row.login_url,
    )
