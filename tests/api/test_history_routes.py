"""The state history routes over real HTTP (docs/api.md, "State history"): the wire of each
answer, restore's If-Match, and the typed refusals. The Python contract over HTTP is
tests/test_history.py; who may call them, tests/api/test_auth.py."""

from __future__ import annotations

from pathlib import Path

import httpx
from tests.api.conftest import SECRET, Served, _serve
from tests.conftest import Clock

from taskstate import AssetScope, TaskScope
from taskstate.api.tokens import SigningKeys
from taskstate.wire import iso

SCOPE = TaskScope("d", "r", "t")
BASE = "/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t"
HISTORY = BASE + "/taskstate-history"
STATE = BASE + "/state-store"


def _at(served: Served, seconds: float) -> str:
    """An instant `seconds` after the test clock's now, as the API writes them."""
    text = iso(served.clock.now + seconds)
    assert text is not None
    return text


def test_history_lists_versions_newest_first_with_who_and_op(
    served: Served, api: httpx.Client
) -> None:
    api.put(f"{STATE}/a%2Fb", json={"value": 1}, headers={"X-Taskstate-Via": "ui"})
    served.clock.now += 10
    api.put(f"{STATE}/a%2Fb", json={"value": {"n": 2}})
    api.delete(f"{STATE}/a%2Fb")
    response = api.get(f"{HISTORY}/a%2Fb")
    assert response.status_code == 200, response.text
    versions = response.json()["versions"]
    assert [(v["version"], v["op"], v["value"]) for v in versions] == [
        (3, "delete", None),
        (2, "set", {"n": 2}),
        (1, "set", 1),
    ]
    assert versions[0]["updated_by"] == {"kind": "api", "subject": "admin"}
    assert versions[2]["updated_by"] == {"kind": "api", "subject": "admin", "via": "ui"}
    assert versions[2]["updated_at"].endswith("Z") and versions[2]["expires_at"].endswith("Z")
    assert len(api.get(f"{HISTORY}/a%2Fb", params={"limit": 1}).json()["versions"]) == 1
    assert api.get(f"{HISTORY}/never").json() == {"versions": []}


def test_as_of_answers_the_value_then_or_a_typed_refusal(served: Served, api: httpx.Client) -> None:
    before = _at(served, -5)
    api.put(f"{STATE}/k", json={"value": "a"})
    served.clock.now += 10
    api.put(f"{STATE}/k", json={"value": "b"})
    then = api.get(f"{HISTORY}/k", params={"as_of": _at(served, -5)})
    assert then.status_code == 200
    assert then.json() == {"key": "k", "value": "a", "as_of": _at(served, -5)}
    absent = api.get(f"{HISTORY}/k", params={"as_of": before})
    assert absent.status_code == 404
    assert absent.headers["x-taskstate-error"] == "KeyNotFoundError"
    naive = api.get(f"{HISTORY}/k", params={"as_of": "2027-01-15T08:00:00"})
    assert naive.status_code == 422
    assert naive.headers["x-taskstate-error"] == "NaiveDatetimeError"
    assert naive.json()["detail"][0]["loc"] == ["query", "as_of"]
    garbage = api.get(f"{HISTORY}/k", params={"as_of": "yesterday"})
    assert garbage.status_code == 422


def test_as_of_past_the_kept_window_is_410(tmp_path: Path, clock: Clock) -> None:
    for served in _serve(tmp_path, clock, SigningKeys([SECRET]), history_versions=1):
        state = served.store.task_state(SCOPE)
        state.set("k", 1)
        early = _at(served, 5)
        clock.now += 10
        state.set("k", 2)  # version 1 falls out of the window of 1
        with served.admin() as api:
            gone = api.get(f"{HISTORY}/k", params={"as_of": early})
        assert gone.status_code == 410
        assert gone.headers["x-taskstate-error"] == "HistoryUnavailableError"


def test_restore_takes_if_match_like_an_edit(served: Served, api: httpx.Client) -> None:
    api.put(f"{STATE}/k", json={"value": "good"})
    stale = api.get(f"{STATE}/k").headers["etag"]
    served.clock.now += 1
    api.put(f"{STATE}/k", json={"value": "bad"})
    current = api.get(f"{STATE}/k").headers["etag"]

    refused = api.post(f"{HISTORY}/k", json={"version": 1}, headers={"If-Match": stale})
    assert refused.status_code == 412
    assert api.get(f"{STATE}/k").json()["value"] == "bad"  # nothing written
    assert len(api.get(f"{HISTORY}/k").json()["versions"]) == 2  # and no version

    done = api.post(f"{HISTORY}/k", json={"version": 1}, headers={"If-Match": current})
    assert done.status_code == 200, done.text
    assert done.json()["version"] == 3 and done.json()["op"] == "restore"
    assert done.json()["value"] == "good"
    assert done.headers["etag"] == api.get(f"{STATE}/k").headers["etag"]

    unknown = api.post(f"{HISTORY}/k", json={"version": 42})
    assert unknown.status_code == 404
    assert unknown.headers["x-taskstate-error"] == "VersionNotFoundError"


def test_restoring_a_deletion_with_if_match_deletes_only_that_version(
    served: Served, api: httpx.Client
) -> None:
    api.put(f"{STATE}/k", json={"value": 1})
    api.delete(f"{STATE}/k")  # version 2: a deletion
    api.put(f"{STATE}/k", json={"value": 3})
    etag = api.get(f"{STATE}/k").headers["etag"]
    absent = api.post(f"{HISTORY}/gone", json={"version": 1}, headers={"If-Match": "*"})
    assert absent.status_code == 412
    done = api.post(f"{HISTORY}/k", json={"version": 2}, headers={"If-Match": etag})
    assert done.status_code == 200 and done.json()["value"] is None
    assert "etag" not in done.headers
    assert api.get(f"{STATE}/k").status_code == 404


def test_restore_task_over_http_and_the_asset_routes(served: Served, api: httpx.Client) -> None:
    api.put(f"{STATE}/k", json={"value": 1})
    good = _at(served, 5)
    served.clock.now += 10
    api.delete(STATE)
    restored = api.post(HISTORY, json={"as_of": good})
    assert restored.status_code == 200 and restored.json() == {"restored": 1}
    assert api.get(f"{STATE}/k").json()["value"] == 1

    asset = served.store.asset_state(AssetScope(name="orders"))
    asset.set("state-store/x", 1)  # a key that spells the state route: still history's key
    assets = "/taskstate/api/v2/assets/taskstate-history"
    versions = api.get(f"{assets}/state-store/x", params={"name": "orders"}).json()["versions"]
    assert [v["value"] for v in versions] == [1]
    none = api.get(assets, params={"name": "orders"})  # an asset's history has no collection
    assert none.status_code == 404 and "x-taskstate-error" not in none.headers


def test_restore_task_preview_says_what_would_change_and_writes_nothing(
    served: Served, api: httpx.Client
) -> None:
    state = served.store.task_state(SCOPE)
    state.set("kept", 1)
    state.set("changed", "old")
    state.set("gone", [1, 2])
    served.store.task_state(TaskScope("d", "r", "t", 0)).set("mapped", 0)
    good = _at(served, 5)
    served.clock.now += 10
    state.set("changed", "new")
    state.delete("gone")
    state.set("later", True)  # created after as_of: the restore deletes it
    before = [v.version for v in state.history("changed")]

    preview = api.get(HISTORY, params={"as_of": good})
    assert preview.status_code == 200, preview.text
    assert preview.json() == {
        "as_of": good,
        "restored": 3,
        "changes": [
            {"map_index": -1, "key": "changed", "then": "old", "now": "new"},
            {"map_index": -1, "key": "gone", "then": [1, 2], "now": None},
            {"map_index": -1, "key": "kept", "then": 1, "now": 1},
            {"map_index": -1, "key": "later", "then": None, "now": True},
        ],
    }
    every = api.get(HISTORY, params={"as_of": good, "all_map_indices": "true"}).json()
    assert every["restored"] == 4
    assert every["changes"][-1] == {"map_index": 0, "key": "mapped", "then": 0, "now": 0}
    assert [v.version for v in state.history("changed")] == before  # nothing written
    assert state.get("later") is True

    # The restore then does what the preview said, and answers the same count.
    assert api.post(HISTORY, json={"as_of": good}).json() == {"restored": 3}
    assert state.get("gone") == [1, 2] and state.get("changed") == "old"
    assert state.get("later") is None

    assert api.get(HISTORY).status_code == 422  # no instant
    naive = api.get(HISTORY, params={"as_of": "2026-12-01T03:00:00"})
    assert naive.status_code == 422


def test_a_task_instance_tokens_writes_name_its_try(served: Served) -> None:
    """A zombie try 1 overwriting try 2's checkpoint shows: each write names the token's try,
    in the history and in `last_updated_by` (over HTTP and in the store's own `Version`)."""
    claims = {"dag_ids": ("d",), "run_id": "r", "task_id": "t", "map_index": -1}
    with (
        served.client(**claims, try_number=2) as try2,
        served.client(**claims, try_number=1) as try1,
    ):
        assert try2.put(f"{STATE}/ckpt", json={"value": 20}).status_code == 204
        assert try1.put(f"{STATE}/ckpt", json={"value": 10}).status_code == 204  # the zombie
        task = {"kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
        assert try1.get(f"{STATE}/ckpt").json()["last_updated_by"] == {**task, "try_number": 1}
        versions = try2.get(f"{HISTORY}/ckpt").json()["versions"]
    assert [(v["value"], v["updated_by"]) for v in versions] == [
        (10, {**task, "try_number": 1}),
        (20, {**task, "try_number": 2}),
    ]
    kept = served.store.task_state(SCOPE).history("ckpt")
    assert [v.updated_by for v in kept] == [v["updated_by"] for v in versions]
