"""Airflow 2's "Task State" extra link, on every task instance (a global operator link)."""

from __future__ import annotations

from typing import Any

from airflow.models.baseoperatorlink import BaseOperatorLink


class TaskStateLink(BaseOperatorLink):  # type: ignore[misc]  # Airflow is untyped here
    name = "Task State"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from flask import url_for  # the webserver asks inside a request

        return str(
            url_for(
                "TaskStateView.index",
                dag_id=ti_key.dag_id,
                run_id=ti_key.run_id,
                task_id=ti_key.task_id,
                map_index=ti_key.map_index,
            )
        )
