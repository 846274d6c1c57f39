"""`taskstate variables migrate`: a watermark or job id held in an Airflow Variable, moved into
asset or task state — the fix `taskstate lint` asks for (TS101–TS105), done for the data too.

The value goes to the store in charge (`versions.native_store_active`): Airflow 3.3+'s own,
through its configured store backend, or taskstate's. Task keys are written with
`NEVER_EXPIRE`, as a Variable never expired either.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import click

from taskstate.errors import TaskStateError
from taskstate.scope import AssetScope, TaskScope
from taskstate.store import StateStore
from taskstate.values import NEVER_EXPIRE, encode_value
from taskstate.writers import cli_writer

Target = TaskScope | AssetScope


def target(
    asset: str | None, dag_id: str | None, run_id: str | None, task_id: str | None, map_index: int
) -> Target:
    """The scope to move the Variable into: the asset when one is named, else the task instance."""
    if asset is not None:
        # An asset's identity is its name; Airflow 3 names a URI-only asset by its URI, and
        # Airflow 2 Datasets have only a URI: either way the one string addresses it.
        return AssetScope(name=asset)
    assert dag_id is not None and run_id is not None and task_id is not None
    return TaskScope(dag_id, run_id, task_id, map_index)


def read_variable(key: str) -> str:
    """The Airflow Variable's text; a `ClickException` when there is no such Variable."""
    from airflow.models import Variable

    raw = Variable.get(key, default_var=None)
    if raw is None:
        raise click.ClickException(f"there is no Airflow Variable {key!r}")
    return str(raw)


def delete_variable(key: str) -> None:
    """Delete the Airflow Variable (`--delete-variable`, once its value is written)."""
    from airflow.models import Variable

    Variable.delete(key)


def state_value(key: str, raw: str, *, as_text: bool) -> Any:
    """The Variable's text as a state value, or a refusal that says why."""
    if as_text:
        value: Any = raw
    else:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise click.ClickException(
                f"Variable {key!r} is not JSON ({exc.msg} at character {exc.pos}: "
                f"{raw[:80]!r}); pass --text to store its text as a string"
            ) from None
    try:
        encode_value(value)  # the state value rules (values.py), with the path of a bad part
    except TaskStateError as exc:
        raise click.ClickException(f"Variable {key!r} cannot be state: {exc}") from None
    return value


def same(a: Any, b: Any) -> bool:
    """Whether two state values are equal as JSON (key order aside)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class Destination(Protocol):
    """Where a migrated Variable's value goes: a store's get, set and description."""

    def describe(self, scope: Target, key: str) -> str:
        """A human description of `key` in `scope`, naming the store."""

    def get(self, scope: Target, key: str) -> Any:
        """The value `key` holds in `scope`, or None."""

    def set(self, scope: Target, key: str, value: Any) -> None:
        """Write `value` to `key` in `scope`."""


def _describe(scope: Target, key: str) -> str:
    if isinstance(scope, AssetScope):
        return f"asset {scope.identity!r} key {key!r}"
    return f"{scope.dag_id}/{scope.run_id}/{scope.task_id}[{scope.map_index}] key {key!r}"


class TaskstateDestination:
    """taskstate's own store, used when Airflow's native state store is not active."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def describe(self, scope: Target, key: str) -> str:
        """As `Destination.describe`, naming taskstate's store."""
        return f"taskstate's store: {_describe(scope, key)}"

    def get(self, scope: Target, key: str) -> Any:
        """As `Destination.get`, from taskstate's asset or task state."""
        if isinstance(scope, AssetScope):
            return self.store.asset_state(scope).get(key)
        return self.store.task_state(scope).get(key)

    def set(self, scope: Target, key: str, value: Any) -> None:
        """As `Destination.set`, written by the CLI; task keys never expire, as Variables do not."""
        if isinstance(scope, AssetScope):
            self.store.asset_state(scope, writer=cli_writer()).set(key, value)
        else:
            state = self.store.task_state(scope, writer=cli_writer())
            state.set(key, value, retention=NEVER_EXPIRE)


class NativeDestination:
    """Airflow 3.3+'s own state store, through its configured backend."""

    def __init__(self) -> None:
        from taskstate.airflow.migrate import AirflowStore

        self.airflow = AirflowStore()

    def describe(self, scope: Target, key: str) -> str:
        """As `Destination.describe`, naming Airflow's state store."""
        return f"Airflow's state store: {_describe(scope, key)}"

    def get(self, scope: Target, key: str) -> Any:
        """As `Destination.get`; refuses a scope gone from Airflow (its run, TI or asset)."""
        gone = self.airflow.missing(scope)
        if gone is not None:
            raise click.ClickException(f"{_describe(scope, key)}: {gone.split(': ', 1)[-1]}")
        return self.airflow.get(scope, key)

    def set(self, scope: Target, key: str, value: Any) -> None:
        """As `Destination.set`, stored in Airflow's store as JSON text."""
        self.airflow.set(scope, key, json.dumps(value, ensure_ascii=False))


def destination(store: Callable[[], StateStore]) -> Destination:
    """The store in charge: Airflow's own when its native store is active, else taskstate's."""
    from taskstate.airflow.versions import native_store_active

    if native_store_active():
        return NativeDestination()
    return TaskstateDestination(store())


def after(scope: Target, key: str, variable: str) -> str:
    """The DAG code to write instead of `Variable.get/set(variable)` (the lint rules' "after")."""
    if isinstance(scope, AssetScope):
        asset = f'Asset("{scope.identity}")'
        return (
            f"# before: Variable.get({variable!r}) ... Variable.set({variable!r}, new_value)\n"
            f"@task(inlets=[{asset}], outlets=[{asset}])\n"
            "def load(asset_state_store=None):\n"
            f"    current = asset_state_store.get({key!r})\n"
            "    ...\n"
            f"    asset_state_store.set({key!r}, new_value)"
        )
    return (
        f"# before: Variable.get({variable!r}) ... Variable.set({variable!r}, new_value)\n"
        f"# in task {scope.task_id!r} of DAG {scope.dag_id!r}:\n"
        f"@task\n"
        f"def {scope.task_id if scope.task_id.isidentifier() else 'my_task'}"
        "(task_state_store=None):\n"
        f"    current = task_state_store.get({key!r})\n"
        "    ...\n"
        f"    task_state_store.set({key!r}, new_value, retention=NEVER_EXPIRE)"
    )
