"""`context["asset_state_store"]`: the state of each asset a task declares, and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from taskstate.errors import AmbiguousAssetError, AssetNotDeclaredError
from taskstate.scope import AssetScope
from taskstate.store import AssetStateStore, StateStore, Writer
from taskstate.values import JsonValue

# Classes (by name, anywhere in the MRO) that name one concrete asset: Airflow 3's Asset and
# its references, Airflow 2's Dataset. Aliases resolve to assets only at run time, so a task
# cannot be said to declare the asset behind one; they are left out.
_ASSET_CLASSES = frozenset({"Asset", "AssetNameRef", "AssetUriRef", "Dataset"})


def is_asset(obj: object) -> bool:
    """Whether `obj` names one concrete asset (Asset, an asset reference, or a Dataset)."""
    return any(cls.__name__ in _ASSET_CLASSES for cls in type(obj).__mro__)


def _name(obj: object) -> str | None:
    # An Airflow 2 Dataset and an AssetUriRef have no name: they are known by their URI.
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name else None


def _uri(obj: object) -> str | None:
    uri = getattr(obj, "uri", None)
    return uri if isinstance(uri, str) and uri else None


class AssetStateStores:
    """One `AssetStateStore` per asset in the task's inlets and outlets.

    Index it with the asset object (`asset_state_store[ORDERS]`). With exactly one asset,
    `get`/`set`/... work on it directly. An asset the task does not declare is a `KeyError`:
    a task reads and writes only the state of assets it says it touches.
    """

    def __init__(
        self, store: StateStore, assets: Iterable[object], writer: Writer | None = None
    ) -> None:
        self._by_name: dict[str, AssetStateStore] = {}
        self._by_uri: dict[str, AssetStateStore] = {}
        for asset in assets:
            name, uri = _name(asset), _uri(asset)
            if name is not None:
                if name not in self._by_name:
                    self._by_name[name] = store.asset_state(
                        AssetScope(name=name, uri=uri), writer=writer
                    )
            elif uri is not None and uri not in self._by_uri:
                self._by_uri[uri] = store.asset_state(AssetScope(uri=uri), writer=writer)

    def __getitem__(self, asset: Any) -> AssetStateStore:
        if not is_asset(asset):
            raise TypeError(
                f"index asset_state_store with an Asset (Airflow 2: Dataset) object; "
                f"got {type(asset).__name__} {asset!r}"
            )
        name = _name(asset)
        found = self._by_name.get(name) if name is not None else self._by_uri.get(_uri(asset) or "")
        if found is None:
            raise AssetNotDeclaredError(
                f"{asset!r} is not in this task's inlets or outlets; add it to inlets (to "
                "read its state) or outlets (to write it) to use its state"
            )
        return found

    def __contains__(self, asset: object) -> bool:
        try:
            self[asset]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[AssetStateStore]:
        yield from self._by_name.values()
        yield from self._by_uri.values()

    def __len__(self) -> int:
        return len(self._by_name) + len(self._by_uri)

    def _single(self) -> AssetStateStore:
        if len(self) != 1:
            raise AmbiguousAssetError(
                f"this task has {len(self)} assets in its inlets and outlets; say which one: "
                "asset_state_store[MY_ASSET].get(...)"
            )
        return next(iter(self))

    # Single-asset sugar: the same methods as AssetStateStore, on the task's only asset.
    def get(self, key: str, default: Any = None) -> Any:
        """As `AssetStateStore.get`, on the task's only asset."""
        return self._single().get(key, default)

    def set(self, key: str, value: JsonValue) -> None:
        """As `AssetStateStore.set`, on the task's only asset."""
        self._single().set(key, value)

    def delete(self, key: str) -> None:
        """As `AssetStateStore.delete`, on the task's only asset."""
        self._single().delete(key)

    def clear(self) -> None:
        """As `AssetStateStore.clear`, on the task's only asset."""
        self._single().clear()

    def keys(self) -> list[str]:
        """As `AssetStateStore.keys`, on the task's only asset."""
        return self._single().keys()

    def items(self) -> list[tuple[str, Any]]:
        """As `AssetStateStore.items`, on the task's only asset."""
        return self._single().items()

    def update(self, key: str, fn: Callable[[Any], JsonValue], *, default: Any = None) -> Any:
        """As `AssetStateStore.update`, on the task's only asset."""
        return self._single().update(key, fn, default=default)

    def compare_and_set(self, key: str, expected: JsonValue | None, new: JsonValue) -> bool:
        """As `AssetStateStore.compare_and_set`, on the task's only asset."""
        return self._single().compare_and_set(key, expected, new)

    async def aget(self, key: str, default: Any = None) -> Any:
        """As `AssetStateStore.aget`, on the task's only asset."""
        return await self._single().aget(key, default)

    async def aset(self, key: str, value: JsonValue) -> None:
        """As `AssetStateStore.aset`, on the task's only asset."""
        await self._single().aset(key, value)

    async def adelete(self, key: str) -> None:
        """As `AssetStateStore.adelete`, on the task's only asset."""
        await self._single().adelete(key)

    async def aclear(self) -> None:
        """As `AssetStateStore.aclear`, on the task's only asset."""
        await self._single().aclear()

    def __repr__(self) -> str:
        names = [store.scope.identity for store in self]
        return f"<AssetStateStores {names!r}>"
