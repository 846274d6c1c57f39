"""`TriggerStateMixin`: a trigger's task state and asset state from the triggerer, async,
through the deployment's backend (SQLite file, PostgreSQL, HTTP with a minted token), without
Airflow: the test plays the triggerer (sets `task_instance`, runs `run()` on an event loop,
re-creates the trigger from its serialised kwargs). Real Airflow: tests/airflow/test_deferrable.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.api.server import running

from taskstate import StateStore, TaskScope
from taskstate.airflow import inject, triggers
from taskstate.airflow.hosting import live_try
from taskstate.airflow.triggers import TriggerStateMixin
from taskstate.airflow.worker import TASK_TOKEN_LIFETIME
from taskstate.api.app import BASE_PATH, create_app
from taskstate.api.auth import Auth
from taskstate.api.context import Hosting
from taskstate.api.tokens import SigningKeys
from taskstate.errors import AccessDeniedError, StaleTryError
from taskstate.settings import Settings

SECRET = "t" * 40
TI = SimpleNamespace(dag_id="d", run_id="r", task_id="poll", map_index=-1, try_number=2)


class Crash(BaseException):
    pass


class PagesTrigger(TriggerStateMixin):
    """Reads `pages` pages, keeping its cursor in the task's state (a BaseTrigger's shape)."""

    def __init__(self, job_id: str, pages: int) -> None:
        self.job_id = job_id
        self.pages = pages
        self.read: list[int] = []
        self.die_after: int | None = None  # the triggerer dies after this many pages

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{__name__}.PagesTrigger", {"job_id": self.job_id, "pages": self.pages}

    async def run(self) -> AsyncIterator[dict[str, Any]]:
        state = self.task_state_store
        page = await state.aget("cursor", 0)
        while page < self.pages:
            if len(self.read) == self.die_after:
                raise Crash
            self.read.append(page)
            page += 1
            await state.aset("cursor", page)
        yield {"external_id": self.job_id, "status": "SUCCEEDED", "pages": page}


def recreate(trigger: PagesTrigger) -> PagesTrigger:
    """What a new triggerer does: rebuild from the stored kwargs, then set task_instance."""
    _path, kwargs = trigger.serialize()
    again = PagesTrigger(**kwargs)
    again.task_instance = TI
    return again


async def first_event(trigger: PagesTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event
    raise AssertionError("no event")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def deployment(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[str]:
    """The triggerer's configuration, read as any Airflow process reads it: a SQLite file, or
    the session's PostgreSQL server (a fresh, migrated database)."""
    url = f"sqlite:///{tmp_path}/state.db"
    if request.param == "postgresql":
        url = request.getfixturevalue("fresh_postgres_url")
        with StateStore(url, settings=Settings()) as store:
            store.migrate()
    monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_URL", url)
    monkeypatch.setattr(inject, "_process_store", None)
    yield url
    monkeypatch.setattr(inject, "_process_store", None)


def test_a_recreated_trigger_resumes_from_the_stored_cursor(deployment: str) -> None:
    first = PagesTrigger("job-1", pages=5)
    first.task_instance = TI
    first.die_after = 3
    with pytest.raises(Crash):
        asyncio.run(first_event(first))
    assert first.read == [0, 1, 2]
    again = recreate(first)
    assert "cursor" not in again.serialize()[1]  # progress is state, not kwargs
    event = asyncio.run(first_event(again))
    assert again.read == [3, 4] and event["pages"] == 5
    with StateStore(deployment, settings=Settings()) as store:
        state = store.task_state(TaskScope("d", "r", "poll"))
        assert state.get("cursor") == 5
        # The trigger writes as the try that deferred to it (TI is try 2).
        tries = {(v.updated_by or {}).get("try_number") for v in state.history("cursor")}
        assert tries == {2}


def test_state_calls_do_not_use_the_loops_default_executor(deployment: str) -> None:
    """The triggerer's default pool is small and shared: tie up all of it, and the trigger's
    state calls still complete (they run on taskstate's own threads)."""
    trigger = PagesTrigger("job-2", pages=20)
    trigger.task_instance = TI
    release = threading.Event()

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        blocked = loop.run_in_executor(None, release.wait)
        try:
            return await asyncio.wait_for(first_event(trigger), timeout=30)
        finally:
            release.set()
            await blocked

    assert asyncio.run(main())["pages"] == 20


def test_update_and_compare_and_set_are_async_too(deployment: str) -> None:
    trigger = PagesTrigger("job-3", pages=0)
    trigger.task_instance = TI

    async def main() -> tuple[Any, bool, bool]:
        state = trigger.task_state_store
        counted = await state.aupdate("polls", lambda n: n + 1, default=0)
        won = await state.acompare_and_set("last_event", None, "e1")
        again = await state.acompare_and_set("last_event", None, "e1")
        return counted, won, again

    assert asyncio.run(main()) == (1, True, False)


class WatcherTrigger(TriggerStateMixin):
    state_assets = ("orders",)


def test_an_event_trigger_has_its_assets_state_and_no_task_state(deployment: str) -> None:
    watcher = WatcherTrigger()
    watcher.task_instance = None

    async def main() -> Any:
        await watcher.asset_state_store.aset("last_event_id", 41)
        return await watcher.asset_state_store.aget("last_event_id")

    assert asyncio.run(main()) == 41
    with pytest.raises(RuntimeError, match="event trigger has asset_state_store only"):
        watcher.task_state_store  # noqa: B018


@pytest.fixture
def http_deployment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[StateStore]:
    """A taskstate server whose host says try 2 of d/r/poll is live (DEFERRED counts), and a
    triggerer configured with its URL and the secret key, no token of its own."""
    store = StateStore(f"sqlite:///{tmp_path}/served.db", settings=Settings())
    # The metadata DB's row for d/r/poll, as `fencing.running_try` reads it.
    hosting = Hosting(
        running_try=lambda *scope: live_try("deferred", 2) if scope[2] == "poll" else None
    )
    app = create_app(store, Auth.standalone(SigningKeys([SECRET])), hosting=hosting)
    with store, running(Starlette(routes=[Mount(BASE_PATH, app)])) as base:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_URL", base + BASE_PATH)
        monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY", SECRET)
        monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_TOKEN", raising=False)
        monkeypatch.setattr(inject, "_process_store", None)
        yield store
        monkeypatch.setattr(inject, "_process_store", None)


def test_over_http_the_trigger_mints_a_token_for_its_try_and_older_tries_are_fenced(
    http_deployment: StateStore,
) -> None:
    current = PagesTrigger("job-4", pages=2)
    current.task_instance = TI
    assert asyncio.run(first_event(current))["pages"] == 2
    served = http_deployment.task_state(TaskScope("d", "r", "poll"))
    assert served.get("cursor") == 2
    writer = {"kind": "task", "dag_id": "d", "run_id": "r", "task_id": "poll", "map_index": -1,
              "try_number": 2}  # the token's try: the server records it  # fmt: skip
    assert served.entry("cursor").updated_by == writer  # type: ignore[union-attr]

    stale = PagesTrigger("job-0", pages=9)  # a trigger left over from try 1
    stale.task_instance = SimpleNamespace(**{**vars(TI), "try_number": 1})
    with pytest.raises(StaleTryError, match="try 1"):
        asyncio.run(first_event(stale))
    assert served.get("cursor") == 2  # nothing written
    assert "Authorization" not in str(current.serialize())  # no credentials in kwargs


def test_over_http_one_accessor_outlives_its_first_token(
    http_deployment: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger polls for days holding the accessor it took at the start of `run()`: its
    token is re-minted at a request once half its life has passed. A token the server finds
    expired fails the call (`AccessDeniedError`) and writes nothing."""
    clock = [time.time() - 1.2 * TASK_TOKEN_LIFETIME]  # the trigger started long ago
    monkeypatch.setattr(triggers, "time", SimpleNamespace(time=lambda: clock[0]))
    trigger = PagesTrigger("job-4", pages=2)
    trigger.task_instance = TI
    state = trigger.task_state_store  # minted now: expired by the server's clock
    with pytest.raises(AccessDeniedError, match="expired"):
        asyncio.run(state.aset("cursor", 1))
    served = http_deployment.task_state(TaskScope("d", "r", "poll"))
    assert served.get("cursor") is None  # nothing written
    clock[0] = time.time()  # the triggerer's clock: more than half the lifetime later
    asyncio.run(state.aset("cursor", 1))  # the same accessor, a fresh token
    assert served.get("cursor") == 1
    assert trigger._trigger_store(TI) is trigger._trigger_store(TI)  # one view per trigger


@pytest.mark.parametrize(
    ("state", "expected"),
    [("running", 4), ("deferred", 4), ("queued", None), ("success", None),
     ("up_for_retry", None), (None, None)],
)  # fmt: skip
def test_the_fence_admits_a_running_or_deferred_try_only(state: str | None, expected) -> None:
    assert live_try(state, 4) == expected


class OrdersWatcher(TriggerStateMixin):
    """The documented watcher recipe (docs/deferrable.md): the last event id handed to Airflow
    is claimed in asset state, with compare-and-set, before the event is yielded."""

    state_assets = ("orders",)

    def __init__(self, source: list[tuple[int, str]]) -> None:
        self.asset_state_store = None  # what Airflow 3.3's BaseEventTrigger.__init__ does
        self.source = source  # stands for a queue / API: (event id, payload), ids ascending

    async def run(self) -> AsyncIterator[dict[str, Any]]:
        state = self.asset_state_store
        last = await state.aget("last_event_id")
        for event_id, payload in self.source:
            if last is not None and event_id <= last:
                continue  # handed to Airflow before the crash: never again
            if not await state.acompare_and_set("last_event_id", last, event_id):
                raise RuntimeError("another triggerer runs this watcher")
            last = event_id
            yield {"event_id": event_id, "payload": payload}


def triggerer(watcher: OrdersWatcher, runs: list[int], die_after: int | None = None) -> None:
    """Airflow's side: each event makes a DAG run; the process may die right after one."""

    async def main() -> None:
        async for event in watcher.run():
            runs.append(event["event_id"])
            if len(runs) == die_after:
                raise Crash

    with contextlib.suppress(Crash):
        asyncio.run(main())


def test_a_watcher_killed_right_after_yielding_makes_no_duplicate_run(deployment: str) -> None:
    source = [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    runs: list[int] = []
    triggerer(OrdersWatcher(source), runs, die_after=2)  # dies after event 2 made its run
    assert runs == [1, 2]
    triggerer(OrdersWatcher(source), runs)  # re-created on another triggerer
    assert runs == [1, 2, 3, 4]


def test_without_the_claim_the_event_in_flight_is_yielded_twice(deployment: str) -> None:
    """Why the recipe claims first: a cursor saved after the yield (the polling pattern)
    repeats the event whose yield the crash followed."""

    class AfterYield(OrdersWatcher):
        async def run(self) -> AsyncIterator[dict[str, Any]]:
            state = self.asset_state_store
            last = await state.aget("after_yield_cursor")
            for event_id, payload in self.source:
                if last is not None and event_id <= last:
                    continue
                yield {"event_id": event_id, "payload": payload}
                await state.aset("after_yield_cursor", event_id)
                last = event_id

    source = [(1, "a"), (2, "b"), (3, "c")]
    runs: list[int] = []
    triggerer(AfterYield(source), runs, die_after=2)
    triggerer(AfterYield(source), runs)
    assert runs == [1, 2, 2, 3]
