"""State inside triggers: `TriggerStateMixin` gives a `BaseTrigger` its task's
`task_state_store` (and `asset_state_store` for the assets it names) in the triggerer.

    class JobTrigger(TriggerStateMixin, BaseTrigger):
        async def run(self):
            cursor = await self.task_state_store.aget("pages_read", 0)
            ...
            await self.task_state_store.aset("pages_read", cursor)

Nothing of it travels in the trigger's kwargs (which Airflow stores in its database): the
task instance comes from `self.task_instance`, which every triggerer (Airflow 2.10-3.3) sets
before `run()`, so a trigger re-created on another triggerer reaches the same state; the
backend and its credentials come from the triggerer's own configuration, as a worker's do
(`[state_store] taskstate_url`, and for HTTP a token minted with `taskstate_secret_key` for
exactly this try, or the pool token `taskstate_token`). Calls go through the accessors' async
twins (`aget`, `aset`, `aupdate`, `acompare_and_set`, `adelete`, `aclear`), which run on
taskstate's own threads, never the triggerer's event loop or its default executor.

Importing this module does not import Airflow.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

from taskstate.airflow.assets import AssetStateStores
from taskstate.airflow.inject import process_store, task_scope, ti_writer
from taskstate.airflow.worker import TASK_TOKEN_LIFETIME, mint_token
from taskstate.scope import AssetScope
from taskstate.store import AssetStateStore, StateStore, TaskStateStore


class TriggerStateMixin:
    """Put first in the bases: `class MyTrigger(TriggerStateMixin, BaseTrigger)`.

    `state_assets` (a class or instance attribute: asset names) are the assets whose state
    the trigger may use; an event trigger sets it from the asset it watches.
    """

    state_assets: Iterable[str] = ()
    task_instance: Any

    @property
    def task_state_store(self) -> TaskStateStore:
        """The state of the task instance that deferred to this trigger (its current try)."""
        ti = getattr(self, "task_instance", None)
        if ti is None:
            raise RuntimeError(
                f"{type(self).__name__} has no task instance: task_state_store exists in "
                "triggers a task deferred to (an event trigger has asset_state_store only)"
            )
        return self._trigger_store(ti).task_state(task_scope(ti), writer=ti_writer(ti))

    @property
    def asset_state_store(self) -> AssetStateStores | AssetStateStore:
        """The state of `state_assets`: indexed by asset, or directly with one asset."""
        names = tuple(dict.fromkeys(self.state_assets))
        if not names:
            raise RuntimeError(
                f"{type(self).__name__} names no assets: set state_assets (asset names) to "
                "use asset_state_store in a trigger"
            )
        ti = getattr(self, "task_instance", None)
        store = self._trigger_store(ti)
        writer = None if ti is None else ti_writer(ti)
        if len(names) == 1:
            return store.asset_state(AssetScope(name=names[0]), writer=writer)
        return AssetStateStores(store, [_Named(n) for n in names], writer)

    @asset_state_store.setter
    def asset_state_store(self, injected: object) -> None:
        # Airflow 3.3's BaseEventTrigger sets it (None in __init__, its native accessor later):
        # with taskstate in charge the deployment's state is taskstate's, so ours is kept.
        pass

    def _trigger_store(self, ti: Any) -> StateStore:
        """The triggerer's store; over HTTP, a view carrying this trigger's own token, which
        is re-minted at a request once half its lifetime has passed: a trigger may poll for
        days holding one accessor."""
        store = process_store()
        http = sys.modules.get("taskstate.backends.http")
        if http is None or not isinstance(store.backend, http.HttpBackend):
            return store
        cached = self.__dict__.get("_taskstate_store")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        now = time.time()
        first = mint_token(ti, self.state_assets, now)
        if first is None:  # no secret key: the pool token, as a worker's
            return store
        minted = [(now, first)]
        assets = tuple(self.state_assets)

        def token() -> str | None:
            at, current = minted[-1]
            now = time.time()
            if now - at >= TASK_TOKEN_LIFETIME / 2:
                current = mint_token(ti, assets, now) or current
                minted[-1] = (now, current)
            return current

        view = StateStore(
            settings=store.settings,
            backend=store.backend.with_token(token),
            worker_backend=store.worker_backend,
            clock=store.clock,
            metrics=store.metrics,
        )
        self.__dict__["_taskstate_store"] = view
        return view


class _Named:
    """An asset known by name only (what AssetStateStores indexes by)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.uri = None

    def __repr__(self) -> str:
        return f"Asset(name={self.name!r})"
