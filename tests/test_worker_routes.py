"""What the HTTP backend's workers need beyond Airflow 3.3's routes, over a real server:
taskstate's per-task-instance markers, and fencing of stale tries (the host says which try is
running; inside Airflow that is the metadata DB, tested for real in tests/airflow/test_celery.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.api.server import running

from taskstate import StateStore, TaskScope
from taskstate.api.app import BASE_PATH, create_app
from taskstate.api.auth import Auth
from taskstate.api.context import Hosting
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.errors import AccessDeniedError, StaleTryError
from taskstate.settings import Settings

KEYS = SigningKeys(["w" * 40])
SCOPE = TaskScope("d", "r", "t", 2)
RUNNING_TRY = 3


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A server whose host says try 3 of d/r/t[2] is running (and nothing else is)."""

    def running_try(dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
        return RUNNING_TRY if (dag_id, run_id, task_id, map_index) == ("d", "r", "t", 2) else None

    store = StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings())
    app = create_app(store, Auth.standalone(KEYS), hosting=Hosting(running_try=running_try))
    with store, running(Starlette(routes=[Mount(BASE_PATH, app)])) as base:
        yield base + BASE_PATH


def client(url: str, **claims: object) -> StateStore:
    token = KEYS.issue(Claims(**{"subject": "test", **claims}))  # type: ignore[arg-type]
    return StateStore(url, settings=Settings(), backend=HttpBackend(url, token=token))


def ti_claims(try_number: int) -> dict[str, object]:
    return {"dag_ids": ("d",), "run_id": "r", "task_id": "t", "map_index": 2,
            "try_number": try_number}  # fmt: skip


def test_markers_round_trip_beside_the_state_not_in_it(url: str) -> None:
    store = client(url, **ti_claims(RUNNING_TRY))
    store.meta(SCOPE).set("attempt", {"try_number": 3})
    store.task_state(SCOPE).set("cursor", 1)
    assert store.meta(SCOPE).get("attempt") == {"try_number": 3}
    assert store.task_state(SCOPE).keys() == ["cursor"]
    store.meta(SCOPE).clear()
    assert store.meta(SCOPE).get("attempt") is None
    assert store.task_state(SCOPE).get("cursor") == 1
    with pytest.raises(AccessDeniedError, match="403"):  # authorised as the task's own state
        client(url, dag_ids=("other",)).meta(SCOPE).set("attempt", 1)


def test_the_running_try_writes_a_stale_try_is_refused(url: str) -> None:
    client(url, **ti_claims(RUNNING_TRY)).task_state(SCOPE).set("cursor", 7)
    stale = client(url, **ti_claims(RUNNING_TRY - 1)).task_state(SCOPE)
    for write in (lambda: stale.set("cursor", 1), lambda: stale.delete("cursor"),
                  lambda: stale.update("cursor", lambda v: v + 1), stale.clear):  # fmt: skip
        with pytest.raises(
            StaleTryError, match="try 2 of the task instance, which is running try 3"
        ):
            write()
    assert stale.get("cursor") == 7  # reads are not fenced, and nothing was written


def test_a_task_instance_that_is_not_running_refuses_every_try(url: str) -> None:
    other = TaskScope("d", "r", "t", 5)
    token = {**ti_claims(1), "map_index": 5}
    with pytest.raises(StaleTryError, match="is not running"):
        client(url, **token).task_state(other).set("k", 1)


def test_people_admin_and_pool_tokens_are_not_fenced(url: str) -> None:
    client(url, admin=True).task_state(SCOPE).set("by_admin", 1)
    client(url, dag_ids=("d",)).task_state(SCOPE).set("by_pool", 1)
    assert client(url, admin=True).task_state(SCOPE).keys() == ["by_admin", "by_pool"]
