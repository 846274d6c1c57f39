"""What a task process checks and sets up before its first store use, on any executor.

1. The refusal (`taskstate.airflow.executors`): no silent per-machine SQLite file under an
   executor that spreads tasks over machines.
2. Credentials for the HTTP backend: a worker holding `[state_store] taskstate_secret_key`
   mints a token for exactly this task instance (dag, run, task, map index, try number, the
   assets it declares). The server fences writes made with it to the running try. Without a
   secret key the backend sends `[state_store] taskstate_token` (a pool token) as it is.
   Whoever holds the secret can mint any scope, admin included; a pool token limits a worker
   pool to what it names.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

from taskstate.airflow.assets import is_asset
from taskstate.airflow.executors import check_task_store
from taskstate.settings import credential
from taskstate.store import StateStore

# A minted token outlives any reasonable try (a resumable job may poll for days); it names one
# try of one task instance, and the server refuses it once that try is no longer running.
TASK_TOKEN_LIFETIME = 7 * 86400


def prepare_task_store(context: Any, store: StateStore) -> None:
    """Before a task's first store use: refuse the default SQLite file where the executor
    spreads tasks over machines (`check_task_store`), and give an HTTP store this try's token."""
    check_task_store(context, store.settings)
    # Loaded only when the store is HTTP: other tasks do not import the HTTP client.
    http = sys.modules.get("taskstate.backends.http")
    if http is not None and isinstance(store.backend, http.HttpBackend):
        token = task_token(context)
        if token is not None:
            store.backend.use_token(token)


def task_token(context: Any) -> str | None:
    """A token for this try of this task instance, when this worker holds a secret key."""
    ti, task = context["ti"], context["task"]
    # Each asset by its identity only (its name, else its uri): listing the uri of a named
    # asset too would also grant the different asset whose identity is that uri.
    assets: list[str] = []
    for asset in (*(task.inlets or ()), *(task.outlets or ())):
        if is_asset(asset):
            identity = getattr(asset, "name", None) or getattr(asset, "uri", None)
            if identity:
                assets.append(identity)
    return mint_token(ti, assets)


def mint_token(ti: Any, assets: Iterable[str] = (), now: float | None = None) -> str | None:
    """A token for try `ti.try_number` of the task instance `ti` names (dag_id, run_id,
    task_id, map_index) and `assets` (with `ti` None: those assets only, an event trigger's),
    signed with `[state_store] taskstate_secret_key`; None without a secret key. Workers and
    triggerers both mint with it."""
    keys = credential("taskstate_secret_key")
    if not keys or not keys.strip():
        return None
    from taskstate.api.tokens import Claims, SigningKeys

    now = time.time() if now is None else now
    if ti is None:
        named = tuple(dict.fromkeys(assets))
        claims = Claims(
            subject="watcher:" + ",".join(named),
            assets=named,
            expires_at=now + TASK_TOKEN_LIFETIME,
        )
        return SigningKeys.parse(keys).issue(claims, now)
    map_index = ti.map_index if ti.map_index is not None else -1
    claims = Claims(
        subject=f"task:{ti.dag_id}/{ti.run_id}/{ti.task_id}/{map_index}",
        dag_ids=(ti.dag_id,),
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=map_index,
        try_number=int(ti.try_number),
        assets=tuple(dict.fromkeys(assets)),
        expires_at=now + TASK_TOKEN_LIFETIME,
    )
    return SigningKeys.parse(keys).issue(claims, now)
