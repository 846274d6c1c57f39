"""Scope identities, and how each maps to one backend namespace string."""

from __future__ import annotations

from dataclasses import dataclass

from taskstate.errors import InvalidScopeError

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


def _field(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidScopeError(f"{name} must be a non-empty str, got {value!r}")
    if SEP in value:
        raise InvalidScopeError(f"{name} must not contain the control character \\x1f: {value!r}")
    return value


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

    @property
    def namespace(self) -> str:
        return task_prefix(self.dag_id, self.run_id, self.task_id) + str(self.map_index)

    @property
    def meta_namespace(self) -> str:
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
        return self.name if self.name is not None else str(self.uri)

    @property
    def namespace(self) -> str:
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


def parse_namespace(namespace: str) -> TaskScope | AssetScope:
    """Inverse of `.namespace`, for listings and export."""
    kind, _, rest = namespace.partition(SEP)
    if kind == TASK_KIND:
        dag_id, run_id, task_id, map_index = rest.split(SEP)
        return TaskScope(dag_id, run_id, task_id, int(map_index))
    if kind == ASSET_KIND:
        return AssetScope(name=rest)
    raise InvalidScopeError(f"not a taskstate namespace: {namespace!r}")
