"""Scope identities, and how each maps to one backend namespace string.

Every field follows the name rules of `taskstate.values` (non-empty text, no control
characters, no lone surrogates), checked when a scope is made. Lengths are bounded as Airflow
bounds its columns (`MAX_LENGTHS`), checked by `check_writable` before a write: a scope over
the bounds, written by an older taskstate, can still be read, listed and deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from taskstate.errors import InvalidScopeError
from taskstate.values import name_problem

# Namespaces are "<kind>\x1f<field>\x1f<field>...": the separator cannot occur in a field, so
# every scope maps to exactly one namespace and a task's map indices share one prefix.
SEP = "\x1f"
TASK_KIND = "t"
ASSET_KIND = "a"
ASSET_PREFIX = ASSET_KIND + SEP  # every asset namespace starts with it
# taskstate's own bookkeeping per task instance (the Airflow integration's re-run and
# re-expansion markers): never user data, never listed or exported as state.
META_KIND = "m"
META_PREFIX = META_KIND + SEP

# Airflow's column widths: ID_LEN (dag_id, task_id, run_id) and the asset name/uri columns.
MAX_LENGTHS = {"dag_id": 250, "run_id": 250, "task_id": 250, "name": 1500, "uri": 1500}


def _field(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidScopeError(f"{name} must be a non-empty str, got {value!r}")
    problem = name_problem(value)
    if problem:
        raise InvalidScopeError(f"{name} {problem}")
    return value


def check_writable(scope: TaskScope | AssetScope) -> None:
    """Refuse a write to a scope whose fields are longer than Airflow allows."""
    for name, limit in MAX_LENGTHS.items():
        value = getattr(scope, name, None)
        if value is not None and len(value) > limit:
            raise InvalidScopeError(
                f"{name} is at most {limit} characters (as in Airflow); this one has "
                f"{len(value)} (starts {value[:40]!r})"
            )


@dataclass(frozen=True)
class TaskScope:
    """One task instance: every try of it shares this scope."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def __post_init__(self) -> None:
        _field("dag_id", self.dag_id)
        _field("run_id", self.run_id)
        _field("task_id", self.task_id)
        if type(self.map_index) is not int or self.map_index < -1:
            raise InvalidScopeError(
                f"map_index must be an int >= -1 (-1 = not mapped), got {self.map_index!r}"
            )

    @cached_property  # a scope is immutable; a server builds one per request and asks often
    def namespace(self) -> str:
        """The backend namespace every row of this task instance's state is filed under."""
        return task_prefix(self.dag_id, self.run_id, self.task_id) + str(self.map_index)

    @property
    def meta_namespace(self) -> str:
        """Where taskstate's own markers for this task instance live (re-run and re-expansion
        detection): beside the user's state, never listed with it."""
        return META_KIND + self.namespace[len(TASK_KIND) :]


@dataclass(frozen=True)
class AssetScope:
    """One asset, shared by every task and DAG run that declares it.

    Identity is the asset's name, or its URI when it has no name (Airflow 3 names an
    `Asset(uri)` by its URI, and an Airflow 2 `Dataset` only has a URI).
    """

    name: str | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        if self.name is None and self.uri is None:
            raise InvalidScopeError("AssetScope needs a name or a uri (or both)")
        if self.name is not None:
            _field("name", self.name)
        if self.uri is not None:
            _field("uri", self.uri)

    @property
    def identity(self) -> str:
        """What addresses the asset: its name, else its URI."""
        return self.name if self.name is not None else str(self.uri)

    @property
    def namespace(self) -> str:
        """The backend namespace the asset's state is filed under."""
        return ASSET_PREFIX + self.identity


def task_prefix(dag_id: str, run_id: str | None = None, task_id: str | None = None) -> str:
    """The namespace prefix shared by every scope under the given (leading) fields."""
    parts = [TASK_KIND, _field("dag_id", dag_id)]
    if run_id is not None:
        parts.append(_field("run_id", run_id))
        if task_id is not None:
            parts.append(_field("task_id", task_id))
    elif task_id is not None:
        raise InvalidScopeError("task_id needs run_id too")
    return SEP.join(parts) + SEP


S = TypeVar("S", TaskScope, AssetScope)


def _stored(cls: type[S], **fields: object) -> S:
    """A scope as a stored row names it, without today's field rules: rows written before
    them are still listed, exported and deleted."""
    scope = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(scope, name, value)
    return scope


def parse_namespace(namespace: str) -> TaskScope | AssetScope:
    """Inverse of `.namespace`, for listings and export."""
    kind, _, rest = namespace.partition(SEP)
    if kind == TASK_KIND:
        dag_id, run_id, task_id, map_index = rest.split(SEP)
        return _stored(
            TaskScope, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=int(map_index)
        )
    if kind == ASSET_KIND:
        return _stored(AssetScope, name=rest, uri=None)
    raise InvalidScopeError(f"not a taskstate namespace: {namespace!r}")
