"""Asset state routes over real HTTP, addressed by name (or uri for an unnamed asset)."""

from __future__ import annotations

import httpx
import pytest
from tests.api.conftest import Served, key_path

from taskstate import AssetScope

ASSETS = "/taskstate/api/v2/assets/state-store"


def test_list_is_empty_without_state(api: httpx.Client) -> None:
    response = api.get(ASSETS, params={"name": "orders"})
    assert response.status_code == 200
    assert response.json() == {"asset_state_store": [], "total_entries": 0, "exact_total": True}


def test_put_get_list_delete_clear(api: httpx.Client, served: Served) -> None:
    by_name = {"name": "orders"}
    assert (
        api.put(f"{ASSETS}/watermark", params=by_name, json={"value": "2025-01-01"}).status_code
        == 204
    )
    assert api.put(f"{ASSETS}/count", params=by_name, json={"value": 3}).status_code == 204
    got = api.get(f"{ASSETS}/watermark", params=by_name)
    assert got.status_code == 200
    assert got.json() == {
        "key": "watermark",
        "value": "2025-01-01",
        "updated_at": "2027-01-15T08:00:00Z",
        "last_updated_by": {"kind": "api", "subject": "admin"},
    }
    assert "etag" in got.headers
    listing = api.get(ASSETS, params=by_name).json()
    assert [e["key"] for e in listing["asset_state_store"]] == ["count", "watermark"]
    assert "expires_at" not in listing["asset_state_store"][0]
    assert served.store.asset_state(AssetScope(name="orders")).get("count") == 3
    assert api.delete(f"{ASSETS}/count", params=by_name).status_code == 204
    assert api.delete(f"{ASSETS}/count", params=by_name).status_code == 204
    assert api.get(f"{ASSETS}/count", params=by_name).status_code == 404
    assert api.get(f"{ASSETS}/count", params=by_name).json() == {
        "detail": "Asset state store key 'count' not found"
    }
    assert api.delete(ASSETS, params=by_name).status_code == 204
    assert api.get(ASSETS, params=by_name).json()["total_entries"] == 0


def test_uri_addresses_an_unnamed_asset_and_the_name_decides(
    api: httpx.Client, served: Served
) -> None:
    uri = "s3://bucket/key?x=1"
    api.put(f"{ASSETS}/k", params={"uri": uri}, json={"value": "by-uri"})
    assert served.store.asset_state(AssetScope(uri=uri)).get("k") == "by-uri"
    api.put(f"{ASSETS}/k", params={"name": "n", "uri": uri}, json={"value": "by-name"})
    assert served.store.asset_state(AssetScope(name="n")).get("k") == "by-name"
    assert api.get(f"{ASSETS}/k", params={"uri": uri}).json()["value"] == "by-uri"


def test_clear_touches_only_that_asset(api: httpx.Client) -> None:
    api.put(f"{ASSETS}/k", params={"name": "a"}, json={"value": 1})
    api.put(f"{ASSETS}/k", params={"name": "b"}, json={"value": 2})
    api.delete(ASSETS, params={"name": "a"})
    assert api.get(f"{ASSETS}/k", params={"name": "b"}).json()["value"] == 2


def test_asset_without_name_or_uri_is_422(api: httpx.Client) -> None:
    for method, path in (("GET", ASSETS), ("PUT", f"{ASSETS}/k"), ("DELETE", ASSETS)):
        response = api.request(method, path, json={"value": 1})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "name"]
    assert api.get(ASSETS, params={"name": ""}).status_code == 422


@pytest.mark.parametrize(
    "body", ['{"value": null}', '{"value": NaN}', '{"value": 1, "expires_at": null}']
)
def test_bad_bodies_are_422(api: httpx.Client, served: Served, body: str) -> None:
    assert api.put(f"{ASSETS}/k", params={"name": "a"}, content=body).status_code == 422
    assert served.store.asset_state(AssetScope(name="a")).keys() == []


@pytest.mark.parametrize("key", [".", "..", "a/b", "%2F", "?", "ключ"])
def test_keys_are_data(api: httpx.Client, served: Served, key: str) -> None:
    path = f"{ASSETS}/{key_path(key)}"
    assert api.put(path, params={"name": "a"}, json={"value": 1}).status_code == 204
    assert api.get(path, params={"name": "a"}).json()["key"] == key
    assert served.store.asset_state(AssetScope(name="a")).keys() == [key]


def test_asset_state_never_expires(api: httpx.Client, served: Served) -> None:
    api.put(f"{ASSETS}/k", params={"name": "a"}, json={"value": 1})
    served.clock.now += 10 * 365 * 86400
    assert api.get(f"{ASSETS}/k", params={"name": "a"}).status_code == 200


def test_conditional_writes(api: httpx.Client) -> None:
    put = api.put(
        f"{ASSETS}/k", params={"name": "a"}, json={"value": 1}, headers={"If-None-Match": "*"}
    )
    assert put.status_code == 204
    etag = put.headers["etag"]
    assert (
        api.put(
            f"{ASSETS}/k", params={"name": "a"}, json={"value": 2}, headers={"If-None-Match": "*"}
        ).status_code
        == 412
    )
    assert (
        api.put(
            f"{ASSETS}/k", params={"name": "a"}, json={"value": 2}, headers={"If-Match": etag}
        ).status_code
        == 204
    )
    assert (
        api.put(
            f"{ASSETS}/k", params={"name": "a"}, json={"value": 3}, headers={"If-Match": etag}
        ).status_code
        == 412
    )
    assert api.get(f"{ASSETS}/k", params={"name": "a"}).json()["value"] == 2


def test_the_id_form_is_only_served_inside_airflow(api: httpx.Client) -> None:
    assert api.get("/taskstate/api/v2/assets/1/state-store").status_code == 404
