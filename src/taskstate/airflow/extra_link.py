"""Airflow 2's "Task State" extra link, on every task instance (a global operator link)."""

from __future__ import annotations

from typing import Any

from airflow.models.baseoperatorlink import BaseOperatorLink


class TaskStateLink(BaseOperatorLink):  # type: ignore[misc]  # Airflow is untyped here
    """The "Task State" link Airflow 2 shows on every task instance, to its state in the FAB
    view."""

    name = "Task State"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The FAB view's URL for the task instance `ti_key` names."""
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
