"""`asset_state_store` rules without Airflow: the objects stand in for Airflow's own asset
classes, which are recognised by class name (Airflow 3 `Asset`, Airflow 2 `Dataset`)."""

from __future__ import annotations

import pytest

from taskstate import StateStore
from taskstate.airflow.assets import AssetStateStores
from taskstate.errors import AmbiguousAssetError, AssetNotDeclaredError


class Asset:
    def __init__(self, name: str, uri: str) -> None:
        self.name, self.uri = name, uri

    def __repr__(self) -> str:
        return f"Asset(name={self.name!r})"


class Dataset:
    def __init__(self, uri: str) -> None:
        self.uri = uri


ORDERS = Asset("orders", "s3://w/orders")
USERS = Asset("users", "s3://w/users")


def test_single_asset_sugar_and_index(store: StateStore) -> None:
    stores = AssetStateStores(store, [ORDERS, ORDERS])
    stores.set("watermark", "t1")
    assert stores[ORDERS].get("watermark") == "t1"
    # The same asset from another task (or DAG run) sees the same state.
    assert AssetStateStores(store, [ORDERS]).get("watermark") == "t1"


def test_several_assets_must_be_indexed(store: StateStore) -> None:
    stores = AssetStateStores(store, [ORDERS, USERS])
    with pytest.raises(AmbiguousAssetError, match=r"2 assets.*asset_state_store\[MY_ASSET\]"):
        stores.get("watermark")
    assert isinstance(AmbiguousAssetError("x"), ValueError)


def test_undeclared_asset_is_a_key_error_naming_it(store: StateStore) -> None:
    stores = AssetStateStores(store, [ORDERS])
    with pytest.raises(KeyError, match="users") as caught:
        stores[USERS]
    assert isinstance(caught.value, AssetNotDeclaredError)
    with pytest.raises(TypeError):
        stores["orders"]


def test_airflow2_datasets_are_known_by_uri(store: StateStore) -> None:
    stores = AssetStateStores(store, [Dataset("s3://w/orders")])
    stores[Dataset("s3://w/orders")].set("k", 1)
    assert stores.get("k") == 1
