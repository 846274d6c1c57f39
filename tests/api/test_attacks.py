"""Issue 23's server defects, each attacked over real HTTP against a real server: the one
authorisation order, fencing of every write a task token can make, raw-path addressing,
conditional requests, readiness, errors without paths, and the open server's Host check."""

from __future__ import annotations

import http.client
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.api.conftest import SECRET, TASK, Served
from tests.api.server import running

from taskstate import StateStore, TaskScope
from taskstate.api.app import BASE_PATH, create_app
from taskstate.api.auth import Auth
from taskstate.api.context import Hosting
from taskstate.api.token_command import token
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.settings import Settings

SCOPE = TaskScope("d", "r", "t")
JSON = {"content-type": "application/json"}
ASSETS = "/taskstate/api/v2/assets/state-store"


def raw(
    served: Served,
    method: str,
    path: str,
    token: str | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """A request with the path exactly as written (no client normalises or re-encodes it)."""
    split = urlsplit(served.base)
    conn = http.client.HTTPConnection(split.hostname, split.port, timeout=30)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body, sent)
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


# -- the order: authenticate -> authorise -> fence -> existence -> body --------------------


@pytest.fixture
def fenced(tmp_path: Path) -> Iterator[str]:
    """A server whose host says try 3 of etl/r/t is running, and which knows only that task
    instance (so writes elsewhere would be 404)."""

    def running_try(dag_id: str, run_id: str, task_id: str, map_index: int) -> int | None:
        return 3 if (dag_id, run_id, task_id, map_index) == ("etl", "r", "t", -1) else None

    def exists(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> bool:
        return (dag_id, run_id, task_id) == ("etl", "r", "t")

    store = StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings())
    hosting = Hosting(task_instance_exists=exists, running_try=running_try)
    app = create_app(store, Auth.standalone(SigningKeys([SECRET])), hosting=hosting)
    with store, running(Starlette(routes=[Mount(BASE_PATH, app)])) as base:
        yield base


def _ti_token(try_number: int, **extra: object) -> str:
    claims = Claims(subject="ti", dag_ids=("etl",), run_id="r", task_id="t", map_index=-1,
                    try_number=try_number, **extra)  # type: ignore[arg-type]  # fmt: skip
    return SigningKeys([SECRET]).issue(claims)


def test_another_dags_write_is_403_before_the_fence_can_say_its_try(
    fenced: str,
) -> None:
    base = fenced
    stale = {"Authorization": f"Bearer {_ti_token(1)}"}
    payroll = f"{base}/taskstate/api/v2/dags/payroll/dagRuns/r/taskInstances/t/state-store/k"
    response = httpx.put(payroll, json={"value": 1}, headers=stale)
    assert response.status_code == 403, response.text  # not 409 "...is running try N"
    assert "try" not in response.json()["detail"]


def test_a_stale_try_writes_no_asset_and_no_marker(fenced: str) -> None:
    base = fenced
    task = f"{base}/taskstate/api/v2/dags/etl/dagRuns/r/taskInstances/t"
    for try_number, expected in ((2, 409), (3, 204)):
        auth = {"Authorization": f"Bearer {_ti_token(try_number, assets=('orders',))}"}
        writes = [
            httpx.put(f"{task}/state-store/k", json={"value": 1}, headers=auth),
            httpx.put(f"{base}{ASSETS}/k", params={"name": "orders"}, json={"value": 1},
                      headers=auth),
            httpx.delete(f"{base}{ASSETS}/k", params={"name": "orders"}, headers=auth),
            httpx.put(f"{task}/taskstate-meta/m", json={"value": 1}, headers=auth),
            httpx.delete(f"{task}/taskstate-meta", headers=auth),
        ]  # fmt: skip
        assert [w.status_code for w in writes] == [expected] * 5, [w.text for w in writes]
    stale = {"Authorization": f"Bearer {_ti_token(2, assets=('orders',))}"}
    assert httpx.get(f"{base}{ASSETS}", params={"name": "orders"}, headers=stale).is_success


def test_fence_before_existence_and_a_bad_body_last(fenced: str) -> None:
    base = fenced
    admin = {"Authorization": "Bearer " + SigningKeys([SECRET]).issue(
        Claims(subject="a", admin=True))}  # fmt: skip
    other = f"{base}/taskstate/api/v2/dags/etl/dagRuns/r/taskInstances/gone/state-store/k"
    assert httpx.put(other, content=b"{", headers={**admin, **JSON}).status_code == 404
    mine = f"{base}/taskstate/api/v2/dags/etl/dagRuns/r/taskInstances/t/state-store/k"
    stale = {"Authorization": f"Bearer {_ti_token(2)}", **JSON}
    assert httpx.put(mine, content=b"{", headers=stale).status_code == 409
    assert httpx.put(mine, content=b"{", headers=admin | JSON).status_code == 422


def test_a_malformed_body_without_credentials_is_401(served: Served) -> None:
    for path in (f"{TASK}/k", f"{ASSETS}/k?name=a"):
        status, _ = raw(served, "PUT", path, body=b"{not json", headers=JSON)
        assert status == 401


def test_a_task_token_lists_only_asset_identities(served: Served) -> None:
    # A token naming "orders" (a named asset) does not grant the asset whose identity is a
    # uri that happens to be listed beside it; tokens list identities only (worker.task_token).
    with served.client(assets=("orders",)) as client:
        named = client.put(f"{ASSETS}/k", params={"name": "orders", "uri": "s3://b/o"},
                           json={"value": 1})  # fmt: skip
        assert named.status_code == 204
        by_uri = client.put(f"{ASSETS}/k", params={"uri": "s3://b/o"}, json={"value": 1})
        assert by_uri.status_code == 403


# -- markers ---------------------------------------------------------------------------------


def test_markers_obey_the_key_and_size_rules_and_go_with_a_clear(
    served: Served, api: httpx.Client
) -> None:
    meta = "/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t/taskstate-meta"
    assert api.put(f"{meta}/{'k' * 600}", json={"value": 1}).status_code == 422
    assert api.put(f"{meta}/big", json={"value": "x" * 100_000}).status_code == 422
    assert api.put(f"{meta}/m", json={"value": 1}).status_code == 204
    assert api.get(f"{meta}/m").json()["value"] == 1
    assert api.delete(TASK).status_code == 204  # the task's clear takes its markers too
    assert api.get(f"{meta}/m").status_code == 404
    assert served.store.meta(SCOPE).get("m") is None


# -- raw-path addressing ---------------------------------------------------------------------


def test_ids_with_slashes_and_dot_ids_are_addressed_as_sent(served: Served) -> None:
    admin = served.token(admin=True)
    path = "/taskstate/api/v2/dags/a%2Fb/dagRuns/%2E/taskInstances/%2E%2E/state-store/x%2Fy"
    assert raw(served, "PUT", path, admin, b'{"value": 1}', JSON)[0] == 204
    assert served.store.task_state(TaskScope("a/b", ".", "..")).get("x/y") == 1
    plain = "/taskstate/api/v2/dags/a/dagRuns/./taskInstances/../state-store/x"
    assert raw(served, "PUT", plain, admin, b'{"value": 2}', JSON)[0] == 204
    assert served.store.task_state(TaskScope("a", ".", "..")).get("x") == 2


def test_keys_that_are_not_utf8_are_422_never_aliased(served: Served) -> None:
    admin = served.token(admin=True)
    for key in ("%FF", "%FE", "a%C3"):
        status, body = raw(served, "PUT", f"{TASK}/{key}", admin, b'{"value": 1}', JSON)
        assert status == 422, body
    assert raw(served, "PUT", "/taskstate/api/v2/dags/%FF/dagRuns/r/taskInstances/t/state-store"
               "/k", admin, b'{"value": 1}', JSON)[0] == 422  # fmt: skip
    assert served.store.entries() is not None and list(served.store.entries()) == []


def test_a_huge_map_index_is_422_on_the_ui_route_too(served: Served) -> None:
    with served.admin() as api:
        huge = "9" * 5000
        where = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": huge}
        ui = api.get("/taskstate/ui/access", params=where)
        assert ui.status_code == 422
        assert api.get(TASK, params={"map_index": huge}).status_code == 422
        # 19 digits, one past the 64-bit range SQLite and the metadata database hold: refused
        # before any query, on the state routes and discovery alike (issue 31)
        for past in (str(2**63), str(-(2**63) - 1)):
            assert (
                api.put(f"{TASK}/k", params={"map_index": past}, json={"value": 1}).status_code
                == 422
            )
        assert api.get("/taskstate/api/v2/dags", params={"offset": str(2**63)}).status_code == 422
        assert api.get(TASK, params={"map_index": str(2**63 - 1)}).status_code == 200
        # /ui/access too (issue 31): 19 digits past 2^63 are 422 as on the state routes, with
        # FastAPI's typed body naming the parameter, never a 500 or an answer about them
        past_max = 2**63 - 1
        for past in (str(2**63), "9" * 19):
            for method in ("GET", "PUT", "DELETE"):
                query = {**where, "map_index": past}
                ui = api.request(method, "/taskstate/ui/access", params=query)
                assert ui.status_code == 422, (method, past, ui.text)
                (error,) = ui.json()["detail"]
                assert error["loc"] == ["query", "map_index"] and error["type"] == "value_error"
                assert error["msg"].startswith(f"map_index must be -1, an integer up to {past_max}")
        largest = api.get("/taskstate/ui/access", params={**where, "map_index": str(2**63 - 1)})
        assert largest.status_code == 200 and largest.json()["allowed"] is True


# -- conditional requests --------------------------------------------------------------------


def test_delete_honours_if_match(api: httpx.Client) -> None:
    first = api.put(f"{TASK}/k", json={"value": 1}).headers["etag"]
    second = api.put(f"{TASK}/k", json={"value": 2}).headers["etag"]
    assert api.delete(f"{TASK}/k", headers={"If-Match": first}).status_code == 412
    assert api.get(f"{TASK}/k").json()["value"] == 2
    assert api.delete(f"{TASK}/k", headers={"If-Match": second}).status_code == 204
    assert api.get(f"{TASK}/k").status_code == 404
    assert api.delete(f"{TASK}/k", headers={"If-Match": "*"}).status_code == 412
    assert api.delete(f"{TASK}/k").status_code == 204  # unconditional: a no-op when absent


def test_the_etag_changes_on_every_acknowledged_write(served: Served, api: httpx.Client) -> None:
    a1 = api.put(f"{TASK}/k", json={"value": "A", "expires_at": None}).headers["etag"]
    assert api.get(f"{TASK}/k").headers["etag"] == a1
    served.clock.now += 1
    expiry = api.put(f"{TASK}/k", json={"value": "A"}).headers["etag"]  # a new expiry
    assert expiry != a1
    assert api.get(f"{TASK}/k", headers={"If-None-Match": a1}).status_code == 200
    with served.client(dag_ids=("d",), subject="someone-else") as other:
        served.clock.now += 1
        writer = other.put(f"{TASK}/k", json={"value": "A"}).headers["etag"]
    assert writer not in (a1, expiry)
    # A -> B -> A with the same writer and expiry: A's first tag does not pass If-Match.
    served.clock.now += 1
    api.put(f"{TASK}/k", json={"value": "B", "expires_at": None})
    served.clock.now += 1
    a2 = api.put(f"{TASK}/k", json={"value": "A", "expires_at": None}).headers["etag"]
    assert a2 != a1
    stale = api.put(f"{TASK}/k", json={"value": "C"}, headers={"If-Match": a1})
    assert stale.status_code == 412
    assert api.put(f"{TASK}/k", json={"value": "C"}, headers={"If-Match": a2}).status_code == 204


# -- readiness and store failures ------------------------------------------------------------


def test_health_is_readiness_and_store_errors_are_503_without_paths(
    served: Served, api: httpx.Client, tmp_path: Path
) -> None:
    api.put(f"{TASK}/k", json={"value": 1})
    with sqlite3.connect(tmp_path / "state.db") as db:  # the store breaks under the server
        db.execute("DROP TABLE taskstate_entries")
    health = api.get("/taskstate/health")
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    anonymous = httpx.get(f"{served.base}/taskstate/health")
    assert anonymous.status_code == 503 and "backend" not in anonymous.json()
    assert str(tmp_path) not in anonymous.text
    assert httpx.get(f"{served.base}/taskstate/health/live").status_code == 200
    for response in (api.get(f"{TASK}/k"), api.put(f"{TASK}/k", json={"value": 2})):
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"]
        assert str(tmp_path) not in response.text and "state.db" not in response.text


# -- the open server, the UI, token create ---------------------------------------------------


def test_an_open_server_answers_loopback_host_names_only(open_served: Served) -> None:
    for host in ("127.0.0.1", "localhost:8765", "[::1]:1", "ui.localhost"):
        status, _ = raw(open_served, "GET", "/taskstate/health", headers={"Host": host})
        assert status == 200, host
    for host in ("attacker.example", "attacker.example:8765", "127.0.0.1.evil.example"):
        status, _ = raw(open_served, "GET", f"{TASK}/k", headers={"Host": host})
        assert status == 421, host


def test_the_ui_page_may_be_framed_by_its_own_origin_only(api: httpx.Client) -> None:
    page = api.get("/taskstate/ui/")
    assert page.headers["x-frame-options"] == "SAMEORIGIN"
    assert "frame-ancestors 'self'" in page.headers["content-security-policy"]


def test_token_create_refuses_empty_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY", SECRET)
    for args in (["--dag-id", ""], ["--asset", " "], ["--dag-id", "d", "--task-id", ""]):
        result = CliRunner().invoke(token, ["create", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "empty" in result.output
    assert CliRunner().invoke(token, ["create", "--dag-id", "d"]).exit_code == 0
