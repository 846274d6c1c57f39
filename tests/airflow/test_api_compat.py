"""A client written against Airflow 3.3.2's public state-store API (its paths, bodies and
status codes), run against Airflow 3.3.2 itself and against taskstate (`/taskstate` base
path, a real uvicorn server): the answers must be the same. Airflow's response fields are
compared (taskstate adds `last_updated_by` to task entries, `try_number` to a task writer's
`last_updated_by` and `exact_total` to listings);
timestamps by presence, 422s by `loc` (taskstate's `msg` is the Python accessor's message)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.airflow.deployment import Deployment, Deployments
from tests.airflow.harness import versions
from tests.api.server import running

from taskstate import AssetScope, StateStore
from taskstate.api.app import BASE_PATH, RefuseControlCharacters, create_app
from taskstate.api.auth import Auth
from taskstate.api.context import Hosting
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.settings import Settings

pytestmark = [
    pytest.mark.airflow,
    # Starting the deployment (its CLI setup, then up to 240 s) and waiting for a run (300 s).
    pytest.mark.timeout(1200),
    pytest.mark.skipif("3.3" not in versions(), reason="Airflow 3.3 not selected"),
]
DAG = "ts_api_scenario"
ASSET = AssetScope(name="ts_api_orders")  # declared by tests/airflow/api_dags/ts_api.py
KEYS = SigningKeys(["compat-test-secret-" + "k" * 32])
# Steps where Airflow 3.3.2 is wrong and taskstate is not: (Airflow's status, ours).
KNOWN = {
    # Its 422 echoes the NaN back as `input`, which JSON cannot carry: a 500 instead.
    "put nested nan": (500, 422),
}


def scenario(
    http: httpx.Client, base: str, run_id: str, asset_id: int
) -> list[tuple[str, int, Any]]:
    """Every request a state-store client makes, with Airflow 3.3's paths under `base`."""
    run = quote(run_id, safe="")
    plain = f"{base}/api/v2/dags/{DAG}/dagRuns/{run}/taskInstances/plain/state-store"
    mapped = f"{base}/api/v2/dags/{DAG}/dagRuns/{run}/taskInstances/mapped/state-store"
    asset = f"{base}/api/v2/assets/{asset_id}/state-store"
    steps: list[tuple[str, str, str, dict[str, Any], Any]] = [
        ("asset list empty", "GET", asset, {}, None),
        ("asset put", "PUT", f"{asset}/w", {}, {"value": {"at": "2025-01-01", "n": [1, 2]}}),
        ("asset put slash key", "PUT", f"{asset}/p%2F2025", {}, {"value": 2}),
        ("asset put more", "PUT", f"{asset}/z", {}, {"value": "last"}),
        ("asset get", "GET", f"{asset}/w", {}, None),
        ("asset get slash key", "GET", f"{asset}/p%2F2025", {}, None),
        ("asset get missing", "GET", f"{asset}/nope", {}, None),
        ("asset list", "GET", asset, {}, None),
        ("asset list page", "GET", asset, {"limit": 1, "offset": 1}, None),
        ("asset put null", "PUT", f"{asset}/bad", {}, {"value": None}),
        ("asset put expiry", "PUT", f"{asset}/bad", {}, {"value": 1, "expires_at": None}),
        ("asset put oversize", "PUT", f"{asset}/bad", {}, {"value": "x" * 70000}),
        ("asset patch", "PATCH", f"{asset}/w", {}, {"value": 3}),
        ("asset unknown id", "GET", f"{base}/api/v2/assets/999999/state-store", {}, None),
        (
            "asset unknown id put",
            "PUT",
            f"{base}/api/v2/assets/999999/state-store/k",
            {},
            {"value": 1},
        ),
        ("asset delete", "DELETE", f"{asset}/z", {}, None),
        ("asset delete missing", "DELETE", f"{asset}/z", {}, None),
        ("asset list after delete", "GET", asset, {}, None),
        ("asset clear", "DELETE", asset, {}, None),
        ("asset list cleared", "GET", asset, {}, None),
        ("list empty", "GET", plain, {}, None),
        ("put", "PUT", f"{plain}/k1", {}, {"value": {"a": [1, 2.5, "x", True, None]}}),
        ("put never", "PUT", f"{plain}/k2", {}, {"value": "two", "expires_at": None}),
        ("put dated", "PUT", f"{plain}/k3", {}, {"value": 3, "expires_at": "2099-01-01T00:00:00Z"}),
        ("put slash key", "PUT", f"{plain}/a%2Fb", {}, {"value": [1]}),
        ("get", "GET", f"{plain}/k1", {}, None),
        ("get never", "GET", f"{plain}/k2", {}, None),
        ("get dated", "GET", f"{plain}/k3", {}, None),
        ("get slash key", "GET", f"{plain}/a%2Fb", {}, None),
        ("get missing", "GET", f"{plain}/nope", {}, None),
        ("list", "GET", plain, {}, None),
        ("list page", "GET", plain, {"limit": 2, "offset": 1}, None),
        ("list clamped", "GET", plain, {"limit": 1000}, None),
        ("patch", "PATCH", f"{plain}/k3", {}, {"value": 33}),
        ("get patched", "GET", f"{plain}/k3", {}, None),
        ("patch missing", "PATCH", f"{plain}/nope", {}, {"value": 1}),
        ("put null", "PUT", f"{plain}/bad", {}, {"value": None}),
        ("put extra field", "PUT", f"{plain}/bad", {}, {"value": 1, "other": 2}),
        ("put no value", "PUT", f"{plain}/bad", {}, {}),
        (
            "put naive date",
            "PUT",
            f"{plain}/bad",
            {},
            {"value": 1, "expires_at": "2099-01-01T00:00:00"},
        ),
        ("put oversize", "PUT", f"{plain}/bad", {}, {"value": "x" * 70000}),
        ("patch null", "PATCH", f"{plain}/k1", {}, {"value": None}),
        ("bad map index", "GET", plain, {"map_index": -2}, None),
        ("bad limit", "GET", plain, {"limit": -1}, None),
        ("delete", "DELETE", f"{plain}/k2", {}, None),
        ("delete missing", "DELETE", f"{plain}/k2", {}, None),
        ("list after delete", "GET", plain, {}, None),
        ("put map 0", "PUT", f"{mapped}/m", {"map_index": 0}, {"value": 0}),
        ("put map 1", "PUT", f"{mapped}/m", {"map_index": 1}, {"value": 1}),
        ("map isolation", "GET", mapped, {"map_index": 0}, None),
        ("clear own index", "DELETE", mapped, {"map_index": 0}, None),
        ("map 1 kept", "GET", f"{mapped}/m", {"map_index": 1}, None),
        ("clear all", "DELETE", mapped, {"all_map_indices": "true"}, None),
        ("map 1 gone", "GET", f"{mapped}/m", {"map_index": 1}, None),
        ("clear", "DELETE", plain, {}, None),
        ("list cleared", "GET", plain, {}, None),
        # Last: Airflow 3.3.2 answers this with a 500 and drops the connection (KNOWN below).
        ("put nested nan", "PUT", f"{plain}/bad", {}, "NaN"),
    ]
    answers = []
    for name, method, url, params, body in steps:
        if body == "NaN":
            response = http.request(method, url, params=params,
                                    content='{"value": {"a": [1, NaN]}}',
                                    headers={"content-type": "application/json"})  # fmt: skip
        else:
            response = http.request(method, url, params=params, json=body)
        answers.append((name, response.status_code, _comparable(response)))
    return answers


def _comparable(response: httpx.Response) -> Any:
    if not response.content:
        return None
    if not response.headers.get("content-type", "").startswith("application/json"):
        return response.text[:200]
    body = _airflows_fields(response.json())
    if response.status_code == 422:
        return sorted(tuple(map(str, error["loc"])) for error in body["detail"])
    if isinstance(body, dict) and "task_state_store" in body:
        return {**body, "task_state_store": [_entry(e) for e in body["task_state_store"]]}
    if isinstance(body, dict) and "asset_state_store" in body:
        return {**body, "asset_state_store": [_entry(e) for e in body["asset_state_store"]]}
    if isinstance(body, dict) and "key" in body:
        return _entry(body)
    return body


def _airflows_fields(body: Any) -> Any:
    """A listing without the field taskstate adds to it (`exact_total`: whether its
    `total_entries` is exact or a lower bound; Airflow's is always exact)."""
    if isinstance(body, dict) and "total_entries" in body:
        return {k: v for k, v in body.items() if k != "exact_total"}
    return body


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Airflow's fields; timestamps by presence (the servers' clocks and rows differ); an asset
    entry's writer by its kind (Airflow names no subject, nor a task writer's `try_number`)."""
    if "expires_at" not in entry:  # an asset entry
        return {
            "key": entry["key"],
            "value": entry["value"],
            "updated_at": entry["updated_at"] is not None,
            "writer": (entry.get("last_updated_by") or {}).get("kind"),
        }
    return {
        "key": entry["key"],
        "value": entry["value"],
        "updated_at": entry["updated_at"] is not None,
        "expires_at": entry["expires_at"] if entry["expires_at"] in (None,) else
        entry["expires_at"][:10],
    }  # fmt: skip


@pytest.fixture(scope="module")
def airflow33(deployments: Deployments) -> Iterator[tuple[Deployment, str, int]]:
    """The 3.3 deployment, a finished run of the scenario DAG, and the id Airflow gave the
    asset `ts_api_orders` (tests/airflow/api_dags/ts_api.py)."""
    deployment = deployments.get("3.3")
    run_id = deployment.trigger(DAG)
    deployment.wait_for_run(DAG, run_id)
    with deployment.client("admin") as http:
        found = http.get("/api/v2/assets", params={"name_pattern": ASSET.name}).json()
    (asset_id,) = [a["id"] for a in found["assets"] if a["name"] == ASSET.name]
    yield deployment, run_id, asset_id


@contextmanager
def taskstate_served(root: Path, asset_id: int) -> Iterator[str]:
    """taskstate's app at /taskstate on a real uvicorn server, with taskstate tokens, and
    Airflow's asset id resolved as the plugin's host does (`Hosting.asset_by_id`)."""
    store = StateStore(f"sqlite:///{root}/state.db", settings=Settings())
    hosting = Hosting(asset_by_id={asset_id: ASSET}.get)
    app = create_app(store, Auth.standalone(KEYS), hosting=hosting)
    with store, running(RefuseControlCharacters(Starlette(routes=[Mount(BASE_PATH, app)]))) as url:
        yield url


def token(**claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS.issue(Claims(**claims))}"}


def compare(theirs: list[tuple[str, int, Any]], ours: list[tuple[str, int, Any]]) -> None:
    for (name, their_status, _), (_, our_status, _) in zip(theirs, ours, strict=True):
        if name in KNOWN:
            assert (their_status, our_status) == KNOWN[name], name
    differences = [
        (t, o) for t, o in zip(theirs, ours, strict=True) if t != o and t[0] not in KNOWN
    ]
    assert not differences, "\n".join(f"airflow {t}\ntaskstate {o}" for t, o in differences)


def test_the_same_client_gets_the_same_answers(
    airflow33: tuple[Deployment, str, int], tmp_path: Path
) -> None:
    deployment, run_id, asset_id = airflow33
    with deployment.client("admin") as http:
        theirs = scenario(http, "", run_id, asset_id)
    with (
        taskstate_served(tmp_path, asset_id) as base,
        httpx.Client(base_url=base, headers=token(subject="admin", admin=True)) as http,
    ):
        ours = scenario(http, "/taskstate", run_id, asset_id)
    compare(theirs, ours)


def refusals(
    anonymous: httpx.Client, viewer: httpx.Client, base: str, run_id: str, asset_id: int
) -> list[tuple[str, int, Any]]:
    """401 (no credentials) and 403 (read-only caller writing) on task and asset routes: the
    status, the body's shape and the `WWW-Authenticate` challenge. The `detail` text is each
    server's own (taskstate's says what to do; docs/api.md)."""
    task = (
        f"{base}/api/v2/dags/{DAG}/dagRuns/{quote(run_id, safe='')}/taskInstances/plain/state-store"
    )
    asset = f"{base}/api/v2/assets/{asset_id}/state-store"
    steps = [
        ("anonymous list", anonymous, "GET", task, None),
        ("anonymous get", anonymous, "GET", f"{task}/k", None),
        ("anonymous put", anonymous, "PUT", f"{task}/k", {"value": 1}),
        ("anonymous clear", anonymous, "DELETE", task, None),
        ("anonymous asset list", anonymous, "GET", asset, None),
        ("anonymous asset put", anonymous, "PUT", f"{asset}/k", {"value": 1}),
        ("viewer list", viewer, "GET", task, None),
        ("viewer put", viewer, "PUT", f"{task}/k", {"value": 1}),
        ("viewer patch", viewer, "PATCH", f"{task}/k", {"value": 1}),
        ("viewer delete", viewer, "DELETE", f"{task}/k", None),
        ("viewer clear", viewer, "DELETE", task, None),
        ("viewer asset list", viewer, "GET", asset, None),
        ("viewer asset put", viewer, "PUT", f"{asset}/k", {"value": 1}),
        ("viewer asset clear", viewer, "DELETE", asset, None),
    ]
    answers: list[tuple[str, int, Any]] = []
    for name, http, method, url, body in steps:
        response = http.request(method, url, json=body)
        shape = _airflows_fields(response.json()) if response.status_code < 400 else {
            k: type(v).__name__ for k, v in response.json().items()
        }  # fmt: skip
        challenge = response.headers.get("www-authenticate")
        answers.append((name, response.status_code, (shape, challenge)))
    return answers


def test_refusals_have_the_same_status_body_shape_and_challenge(
    airflow33: tuple[Deployment, str, int], tmp_path: Path
) -> None:
    deployment, run_id, asset_id = airflow33
    with deployment.client(None) as anonymous, deployment.client("viewer") as viewer:
        theirs = refusals(anonymous, viewer, "", run_id, asset_id)
    read_only = token(subject="viewer", admin=True, read_only=True)
    with (
        taskstate_served(tmp_path, asset_id) as base,
        httpx.Client(base_url=base) as anonymous,
        httpx.Client(base_url=base, headers=read_only) as viewer,
    ):
        ours = refusals(anonymous, viewer, "/taskstate", run_id, asset_id)
    compare([(n, s, shape) for n, s, (shape, _) in theirs], [(n, s, b) for n, s, (b, _) in ours])
    # The one deliberate difference (docs/api.md): taskstate's 401 carries the challenge that
    # RFC 9110 requires (`WWW-Authenticate: Bearer`); Airflow 3.3.2's carries none.
    challenges = {(t[2][1], o[2][1]) for t, o in zip(theirs, ours, strict=True) if t[1] == 401}
    assert challenges == {(None, "Bearer")}, challenges
