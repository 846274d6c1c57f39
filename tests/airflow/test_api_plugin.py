"""taskstate's HTTP API inside real Airflow: the plugin on the api-server of Airflow 3.0, 3.1
and 3.2 and on the webserver of Airflow 2.10 and 2.11 (every version the README says it serves),
with Airflow's own authentication and permissions, against state that real DAG runs write and
read. One shared deployment per version (tests/airflow/deployment.py)."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.airflow.deployment import Deployment, Deployments
from tests.airflow.harness import airflow_env, checkout_overlay, not_selected, versions

from taskstate import StateStore, TaskScope
from taskstate.backends.http import HttpBackend
from taskstate.errors import ConfigError, KeyNotFoundError
from taskstate.settings import Settings

# The first test starts the deployment (its CLI setup, then up to 240 s), waits for a task
# instance (180 s) and a run (300 s); the fencing test for try 2 (300 s) and its run (300 s).
# Each Airflow CLI call took up to 3 minutes on a machine at load 27: room for that too.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1500)]

# Every version whose api-server or webserver hosts the plugin (3.3+ serves its own routes).
HOSTED = ("3.2", "2.11", "3.1", "3.0", "2.10")
HOSTS = [v for v in HOSTED if v in versions()] or ["none"]
# Tests of Airflow 2's webserver only (its CSRF check, its FAB pages): not collected for 3.x.
AIRFLOW2 = ("2.11", "2.10")
AIRFLOW2_HOST = [v for v in AIRFLOW2 if v in versions()] or ["none-2"]
V2 = "/taskstate/api/v2"


def task_url(run_id: str, task_id: str) -> str:
    return f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/{task_id}/state-store"


@pytest.fixture(scope="module", params=HOSTS)
def deployment(request: pytest.FixtureRequest, deployments: Deployments) -> Deployment:
    if request.param == "none":
        pytest.skip(not_selected(HOSTED))
    if request.param == "none-2":
        pytest.skip(not_selected(AIRFLOW2))
    return deployments.get(request.param)


_runs: dict[str, str] = {}


@pytest.fixture
def run_id(deployment: Deployment) -> str:
    """One finished `ts_api` run per deployment: `go` went in over HTTP while it ran."""
    if deployment.version not in _runs:
        run = deployment.trigger("ts_api")
        with deployment.client("admin") as http:
            _put_when_instance_exists(http, f"{task_url(run, 'reader')}/go", {"from": "http"})
        deployment.wait_for_run("ts_api", run)
        _runs[deployment.version] = run
    return _runs[deployment.version]


def _put_when_instance_exists(http: httpx.Client, url: str, value: Any) -> None:
    """404 until the scheduler has created the task instance (writes need it, as in 3.3)."""
    deadline = time.monotonic() + 180
    while True:
        response = http.put(url, json={"value": value})
        if response.status_code == 204:
            return
        assert response.status_code == 404, response.text
        assert "Task instance not found" in response.json()["detail"]
        assert time.monotonic() < deadline, "the task instance never appeared"
        time.sleep(1)


def test_a_dag_run_and_http_see_each_others_state(deployment: Deployment, run_id: str) -> None:
    with deployment.client("admin") as http:
        written = http.get(f"{task_url(run_id, 'writer')}/written_by_dag")
        assert written.status_code == 200, written.text
        body = written.json()
        assert body["value"] == {"run_id": run_id, "n": 42}
        assert body["last_updated_by"] == {
            "kind": "task", "dag_id": "ts_api", "run_id": run_id, "task_id": "writer",
            "map_index": -1, "try_number": 1,
        }  # fmt: skip
        seen = http.get(f"{task_url(run_id, 'reader')}/seen").json()
        assert seen["value"] == {"from": "http"}
        go = http.get(f"{task_url(run_id, 'reader')}/go").json()
        assert go["last_updated_by"] == {"kind": "api", "subject": "admin"}


def test_asset_state_by_name_or_uri_and_by_airflows_id(deployment: Deployment, run_id: str) -> None:
    with deployment.client("admin") as http:
        if deployment.major >= 3:
            query = {"name": "ts_api_orders"}
            found = http.get("/api/v2/assets", params={"name_pattern": "ts_api_orders"}).json()
            asset_id = found["assets"][0]["id"]
        else:
            query = {"uri": "file:///ts/api/orders"}
            found = http.get("/api/v1/datasets", params={"uri_pattern": "ts/api/orders"}).json()
            asset_id = found["datasets"][0]["id"]
        by_query = http.get(f"{V2}/assets/state-store/watermark", params=query)
        assert by_query.status_code == 200, by_query.text
        assert by_query.json()["value"].startswith("ts_")  # the latest run's id
        by_id = http.get(f"{V2}/assets/{asset_id}/state-store").json()
        assert [e["key"] for e in by_id["asset_state_store"]] == ["watermark"]
        no_such_id = http.get(f"{V2}/assets/999999/state-store")
        assert no_such_id.status_code == 404  # typed: no such asset, not no such route
        assert no_such_id.headers["X-Taskstate-Error"] == "KeyNotFoundError"
        listed = http.get(f"{V2}/assets").json()["assets"]
        assert {"name": next(iter(query.values())), "keys": 1} in listed
    if deployment.major >= 3:  # the id Airflow's auth manager is asked about, as for its routes
        lookup = deployment.home.python(
            "-c",
            "from taskstate import AssetScope\n"
            "from taskstate.airflow.hosting import asset_id\n"
            "print(asset_id(AssetScope(name='ts_api_orders')), "
            "asset_id(AssetScope(name='no_such_asset')))",
        )
        assert lookup.returncode == 0, lookup.stderr
        assert lookup.stdout.splitlines()[-1].split() == [str(asset_id), "None"]  # after logs


def test_permissions_are_airflows(deployment: Deployment, run_id: str) -> None:
    url = f"{task_url(run_id, 'writer')}/written_by_dag"
    with deployment.client(None) as anonymous:
        assert anonymous.get(url).status_code == 401
        assert anonymous.put(url, json={"value": 1}).status_code == 401
    with deployment.client("viewer") as viewer:
        assert viewer.get(url).status_code == 200
        refused = viewer.put(url, json={"value": "viewer was here"})
        assert refused.status_code == 403, refused.text
        assert viewer.delete(url).status_code == 403
    with deployment.client("admin") as admin:
        assert admin.get(url).json()["value"]["n"] == 42  # the refused writes wrote nothing
        assert (
            admin.put(f"{task_url(run_id, 'writer')}/extra", json={"value": 1}).status_code == 204
        )
        missing = admin.put(f"{task_url(run_id, 'no_such_task')}/k", json={"value": 1})
        assert missing.status_code == 404
        assert admin.get(f"{V2}/dags").json()["dags"][0]["dag_id"] == "ts_api"


def test_history_routes_inside_airflow_with_airflows_permissions(
    deployment: Deployment, run_id: str
) -> None:
    """A viewer may read a key's history, not restore it; a restore of a task instance Airflow
    does not know is 404, as a write is (docs/api.md, "State history")."""
    state = f"{task_url(run_id, 'writer')}/history_key"
    history = state.replace("/state-store/", "/taskstate-history/")
    with deployment.client("admin") as admin:
        assert admin.put(state, json={"value": "good"}).status_code == 204
        assert admin.put(state, json={"value": "bad"}).status_code == 204
    with deployment.client("viewer") as viewer:
        versions = viewer.get(history).json()["versions"]
        assert [v["value"] for v in versions[:2]] == ["bad", "good"]
        first = versions[1]["version"]
        refused = viewer.post(history, json={"version": first})
        assert refused.status_code == 403, refused.text
        # The task instance's restore preview (the UI's) is a read: the viewer may ask.
        now = datetime.now(timezone.utc).isoformat()
        preview = viewer.get(history.rsplit("/", 1)[0], params={"as_of": now})
        assert preview.status_code == 200, preview.text
        assert {"map_index": -1, "key": "history_key", "then": "bad", "now": "bad"} in (
            preview.json()["changes"]
        )
    with deployment.client("admin") as admin:
        done = admin.post(history, json={"version": first})
        assert done.status_code == 200, done.text
        assert done.json()["op"] == "restore" and admin.get(state).json()["value"] == "good"
        missing = history.replace("/writer/", "/no_such_task/")
        assert admin.post(missing, json={"version": 1}).status_code == 404


def test_taskstate_tokens_work_inside_airflow(deployment: Deployment, run_id: str) -> None:
    url = f"{task_url(run_id, 'writer')}/written_by_dag"
    allowed = {"Authorization": f"Bearer {deployment.taskstate_token(dag_ids=('ts_*',))}"}
    other = {"Authorization": f"Bearer {deployment.taskstate_token(dag_ids=('other',))}"}
    with httpx.Client(base_url=deployment.base_url, timeout=60) as http:
        assert http.get(url, headers=allowed).status_code == 200
        assert http.get(url, headers=other).status_code == 403
        forged = {"Authorization": "Bearer not-a-token"}
        assert http.get(url, headers=forged).status_code == 401


def test_a_write_with_the_previous_trys_token_is_fenced_while_the_next_try_runs(
    deployment: Deployment,
) -> None:
    """Try 2 of `ts_fence.held` is RUNNING (try 1 failed): a write with a task-instance token
    for try 1 is refused (409) and writes nothing, to the task's state as to its asset's; try
    2's token writes (then releases it)."""
    run = deployment.trigger("ts_fence")
    url = f"{V2}/dags/ts_fence/dagRuns/{run}/taskInstances/held/state-store"
    tokens = {
        n: {"Authorization": "Bearer " + deployment.taskstate_token(
            subject=f"try {n}", dag_ids=("ts_fence",), run_id=run, task_id="held", map_index=-1,
            try_number=n, assets=("ts_fence_asset",))}
        for n in (1, 2)
    }  # fmt: skip
    with httpx.Client(base_url=deployment.base_url, timeout=60) as http:
        deadline = time.monotonic() + 300
        while (seen := http.get(f"{url}/running", headers=tokens[2])).status_code != 200:
            assert seen.status_code == 404, seen.text
            assert time.monotonic() < deadline, f"try 2 never ran\n{deployment.log_tail()}"
            time.sleep(1)
        assert seen.json()["value"] == 2
        held = {"kind": "task", "dag_id": "ts_fence", "run_id": run, "task_id": "held",
                "map_index": -1, "try_number": 2}  # fmt: skip
        assert seen.json()["last_updated_by"] == held  # the task's own write names its try
        stale = http.put(f"{url}/k", json={"value": "from try 1"}, headers=tokens[1])
        assert stale.status_code == 409, stale.text
        assert "this token is for try 1" in stale.json()["detail"], stale.text
        assert "is running try 2" in stale.json()["detail"], stale.text
        assert http.get(f"{url}/k", headers=tokens[2]).status_code == 404  # nothing written
        # The asset a task-instance token names is fenced the same way.
        asset = {"name": "ts_fence_asset"}
        asset_url = f"{V2}/assets/state-store/k"
        stale = http.put(asset_url, params=asset, json={"value": 1}, headers=tokens[1])
        assert stale.status_code == 409, stale.text
        assert http.get(asset_url, params=asset, headers=tokens[2]).status_code == 404
        wrote = http.put(asset_url, params=asset, json={"value": 2}, headers=tokens[2])
        assert wrote.status_code == 204, wrote.text
        assert (
            http.put(f"{url}/k", json={"value": "from try 2"}, headers=tokens[2]).status_code == 204
        )
        assert http.get(f"{url}/k", headers=tokens[2]).json()["last_updated_by"] == held
        history = url.replace("/state-store", "/taskstate-history") + "/k"
        versions = http.get(history, headers=tokens[2]).json()["versions"]
        assert [v["updated_by"] for v in versions] == [held]  # try 1's refused write: none
        assert (
            http.put(f"{url}/release", json={"value": True}, headers=tokens[2]).status_code == 204
        )
    deployment.wait_for_run("ts_fence", run)


def test_the_python_client_tells_a_missing_task_instance_from_a_wrong_url(
    deployment: Deployment, run_id: str
) -> None:
    """Airflow's 404 for a task instance it does not know is typed (`X-Taskstate-Error`), so
    the client raises KeyNotFoundError, not "no such route" (ConfigError)."""
    url = deployment.base_url + "/taskstate"
    token = deployment.taskstate_token(dag_ids=("ts_*",))
    remote = StateStore(url, settings=Settings(), backend=HttpBackend(url, token=token))
    with pytest.raises(KeyNotFoundError, match="Task instance not found"):
        remote.task_state(TaskScope("ts_api", run_id, "no_such_task")).set("k", 1)
    assert remote.task_state(TaskScope("ts_api", run_id, "writer")).get("written_by_dag") == {
        "run_id": run_id,
        "n": 42,
    }
    # The listings under a dag and a run id (read from the raw path: a run id holds `:`, `+`).
    assert TaskScope("ts_api", run_id, "writer") in {s for s, _ in remote.scopes()}
    wrong = StateStore(url, settings=Settings(), backend=HttpBackend(url + "/x", token=token))
    with pytest.raises(ConfigError, match="taskstate_url"):
        wrong.task_state(TaskScope("ts_api", run_id, "writer")).get("written_by_dag")


def test_doctor_says_the_plugin_serves(deployment: Deployment) -> None:
    status, detail = deployment.home.doctor()["http api"]
    assert status == "ok"
    assert detail.startswith("served by the taskstate plugin")


@pytest.mark.skipif("3.3" not in versions(), reason="Airflow 3.3 not selected")
@pytest.mark.parametrize(("mode", "served"), [(None, False), ("taskstate", True)])
def test_on_airflow_33_the_plugin_stands_aside_unless_taskstate_is_in_charge(
    tmp_path: Path, mode: str | None, served: bool
) -> None:
    env = airflow_env("3.3")
    overlay = checkout_overlay(env, tmp_path / "checkout")
    code = (
        "from taskstate.airflow.plugin import TaskStatePlugin; "
        "print([a['url_prefix'] for a in TaskStatePlugin().fastapi_apps])"
    )
    extra = {} if mode is None else {"AIRFLOW__STATE_STORE__TASKSTATE_MODE": mode}
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", code],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(tmp_path),
            "PYTHONPATH": str(overlay),
            **extra,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == ("['/taskstate']" if served else "[]")


def test_the_ui_session_writes_exactly_as_on_airflows_own_api(
    deployment: Deployment, run_id: str
) -> None:
    """2.x: a write with the session cookie needs the CSRF token (400 without), as Airflow 2's
    own API. 3.1+: Airflow's own API takes a write with only the UI's `_token` cookie (no CSRF
    token exists; the cookie is SameSite=Lax, so other sites' pages cannot send it with a
    write), and so does the plugin (docs/api.md). 3.0: its API reads no cookie (its UI sends
    the token as a header), nor does the plugin there."""
    url = f"{task_url(run_id, 'writer')}/from_the_ui"
    if deployment.major >= 3:  # the UI keeps Airflow's JWT in the `_token` cookie
        token = deployment.credentials("admin")["Authorization"].split(" ", 1)[1]
        with httpx.Client(base_url=deployment.base_url, cookies={"_token": token}) as ui:
            own = ui.post("/api/v2/variables", json={"key": f"ui_{run_id}", "value": "1"})
            if deployment.version == "3.0":  # its API reads the header only, so does ours
                assert own.status_code == 401, own.text
                assert ui.put(url, json={"value": 1}).status_code == 401
                assert ui.get(url).status_code == 401
                return
            assert own.status_code == 201, own.text  # Airflow's own route: the cookie suffices
            assert ui.put(url, json={"value": 1}).status_code == 204
            assert ui.get(url).json()["last_updated_by"] == {"kind": "api", "subject": "admin"}
        return
    with _ui_session(deployment) as ui:
        assert ui.get(url).status_code == 404  # logged in: the key is just absent
        refused = ui.put(url, json={"value": 1})
        assert refused.status_code == 400  # no CSRF token
        page = ui.get("/home").text
        token = re.search(r"var csrfToken = '([^']+)'", page)  # what the UI's JavaScript sends
        assert token is not None, page[:2000]
        ok = ui.put(url, json={"value": 1}, headers={"X-CSRFToken": token.group(1)})
        assert ok.status_code == 204, ok.text
        assert ui.get(url).json()["last_updated_by"] == {"kind": "api", "subject": "admin"}


@contextmanager
def _ui_session(deployment: Deployment) -> Iterator[httpx.Client]:
    """A browser's session on Airflow 2's webserver: signed in as admin through the login form
    (the session cookie only, no Authorization header)."""
    with httpx.Client(base_url=deployment.base_url, follow_redirects=True, timeout=60) as ui:
        form = ui.get("/login/").text
        csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', form)
        assert csrf is not None, form[:2000]
        ui.post("/login/", data={"username": "admin", "password": "admin-pw",
                                 "csrf_token": csrf.group(1)})  # fmt: skip
        yield ui


_fab_users: set[tuple[str, str]] = set()


def _fab_user(deployment: Deployment, name: str, role: str) -> dict[str, str]:
    """Basic-auth headers of a FAB user with `role`, created on first use through Airflow 2's
    users API (the CLI would take half a minute on a loaded machine)."""
    if (deployment.version, name) not in _fab_users:
        with deployment.client("admin") as admin:
            created = admin.post("/api/v1/users", json={
                "username": name, "password": f"{name}-pw", "email": f"{name}@example.com",
                "first_name": name, "last_name": "test", "roles": [{"name": role}],
            })  # fmt: skip
        assert created.status_code in (200, 409), created.text  # 409: made by an earlier run
        _fab_users.add((deployment.version, name))
    pair = base64.b64encode(f"{name}:{name}-pw".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def test_asset_state_writes_need_the_permission_airflows_own_dataset_routes_need(
    deployment: Deployment,
) -> None:
    """2.x: writing asset state is FAB's `can_create` on Datasets (Admin, Op, User), deleting
    `can_delete` (Admin, Op); a Viewer does neither. 3.x: the auth manager's asset PUT/DELETE."""
    url = f"{V2}/assets/state-store/cursor"
    query = {"name": "ts_perm_asset"}
    writers = ["admin"]
    with deployment.client("viewer") as viewer:
        assert viewer.put(url, params=query, json={"value": 0}).status_code == 403
        assert viewer.delete(url, params=query).status_code == 403
    with deployment.client("admin") as admin:
        written = admin.put(url, params=query, json={"value": "admin"})
        assert written.status_code == 204, written.text
        if deployment.major < 3:
            op = _fab_user(deployment, "op", "Op")
            wrote = admin.put(url, params=query, json={"value": "op"}, headers=op)
            assert wrote.status_code == 204, wrote.text
            writers.append("op")
            assert admin.get(url, params=query, headers=op).json()["value"] == "op"
            assert admin.delete(url, params=query, headers=op).status_code == 204
            assert admin.get(url, params=query).status_code == 404
            user = _fab_user(deployment, "user", "User")  # may create, not delete (Airflow 2)
            wrote = admin.put(url, params=query, json={"value": "user"}, headers=user)
            assert wrote.status_code == 204, wrote.text
            writers.append("user")
            assert admin.delete(url, params=query, headers=user).status_code == 403
            dag_only = _ts_api_reader(deployment)  # a role for DAG ts_api only: no datasets
            refused = admin.put(url, params=query, json={"value": 1}, headers=dag_only)
            assert refused.status_code == 403, refused.text
            assert admin.delete(url, params=query, headers=dag_only).status_code == 403
            assert admin.get(url, params=query).json()["value"] == "user"  # refused: unchanged
            assert admin.put(url, params=query, json={"value": 1}).status_code == 204
        assert admin.delete(url, params=query).status_code == 204
    with deployment.client("viewer") as viewer:  # what the viewer may still do: read
        assert viewer.get(url, params=query).status_code == 404
    assert writers == (["admin"] if deployment.major >= 3 else ["admin", "op", "user"])


def _fab_role(deployment: Deployment, name: str, permissions: list[tuple[str, str]]) -> None:
    """A FAB role holding exactly `permissions` ((action, resource) pairs), made on first use
    through Airflow 2's roles API."""
    with deployment.client("admin") as admin:
        created = admin.post("/api/v1/roles", json={"name": name, "actions": [
            {"action": {"name": action}, "resource": {"name": resource}}
            for action, resource in permissions
        ]})  # fmt: skip
    assert created.status_code in (200, 409), created.text  # 409: made by an earlier run


def _ts_api_reader(deployment: Deployment) -> dict[str, str]:
    """Basic-auth headers of a FAB user whose one role may read DAG `ts_api` (its runs and task
    instances) and nothing else: no other DAG, no datasets (Airflow 2)."""
    _fab_role(deployment, "ts_api_reader", [
        ("can_read", "DAG:ts_api"), ("can_read", "DAG Runs"), ("can_read", "Task Instances"),
    ])  # fmt: skip
    return _fab_user(deployment, "ts_api_reader", "ts_api_reader")


def test_a_dag_the_caller_may_not_see_is_403_as_on_airflows_own_routes(
    deployment: Deployment, run_id: str
) -> None:
    """Issue 30: a caller who may not see a DAG was answered an empty listing, which the page
    read as "No run of this DAG holds state". 2.x: a real FAB role that may read DAG `ts_api`
    alone; 3.x (the simple auth manager has no per-DAG roles): a taskstate token for `ts_api`,
    and Airflow's viewer, who may see both."""
    if deployment.major < 3:
        headers = _ts_api_reader(deployment)
    else:
        token = deployment.taskstate_token(dag_ids=("ts_api",), subject="ts_api_reader")
        headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=deployment.base_url, headers=headers, timeout=60) as reader:
        runs = reader.get(f"{V2}/dags/ts_api/dagRuns")
        assert runs.status_code == 200, runs.text
        assert run_id in [r["dag_run_id"] for r in runs.json()["dag_runs"]]
        for path in ("ts_ui/dagRuns", f"ts_ui/dagRuns/{run_id}/taskInstances"):
            refused = reader.get(f"{V2}/dags/{path}")
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["detail"].startswith(
                "'ts_api_reader' may not GET any task state of dag_id='ts_ui'"
            )
        assert [d["dag_id"] for d in reader.get(f"{V2}/dags").json()["dags"]] == ["ts_api"]
        access = {
            dag: reader.get("/taskstate/ui/access", params={"dag_id": dag}).json()["allowed"]
            for dag in ("ts_api", "ts_ui")
        }
        assert access == {"ts_api": True, "ts_ui": False}
        if deployment.major < 3:  # the same user on Airflow's own route for that DAG's runs
            assert reader.get("/api/v1/dags/ts_ui/dagRuns").status_code == 403
            assert reader.get("/api/v1/dags/ts_api/dagRuns").status_code == 200
    with deployment.client("viewer") as viewer:  # Airflow's viewer may see every DAG
        assert viewer.get(f"{V2}/dags/ts_ui/dagRuns").status_code == 200
        assert viewer.get("/taskstate/ui/access", params={"dag_id": "ts_ui"}).json()["allowed"]


def test_ids_past_64_bits_are_refused_before_any_query(deployment: Deployment, run_id: str) -> None:
    huge, just_past = "9" * 31, str(2**63)
    url = f"{task_url(run_id, 'writer')}/k"
    with deployment.client("viewer") as viewer:
        for asset_id in (huge, just_past):
            for path in ("", "/watermark"):
                found = viewer.get(f"{V2}/assets/{asset_id}/state-store{path}")
                assert found.status_code == 404, found.text
        assert viewer.get(f"{V2}/assets/{2**63 - 1}/state-store").status_code == 404  # a query
        assert viewer.get(f"{V2}/dags", params={"offset": huge}).status_code == 422
        where = {"dag_id": "ts_api", "run_id": run_id, "task_id": "writer", "map_index": just_past}
        assert viewer.get("/taskstate/ui/access", params=where).status_code == 422  # 19 digits
    with deployment.client("admin") as admin:
        for index in (huge, just_past, f"-{huge}"):
            refused = admin.put(url, params={"map_index": index}, json={"value": 1})
            assert refused.status_code == 422, (index, refused.text)
        for method in ("GET", "DELETE"):
            assert admin.request(method, url, params={"map_index": just_past}).status_code == 422
        marker = f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/writer/taskstate-meta/m"
        refused = admin.put(marker, params={"map_index": just_past}, json={"value": 1})
        assert refused.status_code == 422, refused.text
        largest = admin.put(url, params={"map_index": str(2**63 - 1)}, json={"value": 1})
        assert largest.status_code == 404, largest.text  # in range: asked, no such instance


def test_markers_of_a_task_instance_that_does_not_exist_are_404(
    deployment: Deployment, run_id: str
) -> None:
    missing = f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/no_such_task"
    with deployment.client("admin") as admin:
        state = admin.put(f"{missing}/state-store/k", json={"value": 1})
        marker = admin.put(f"{missing}/taskstate-meta/k", json={"value": 1})
        assert (state.status_code, marker.status_code) == (404, 404), marker.text
        assert marker.headers["X-Taskstate-Error"] == "KeyNotFoundError"
        assert admin.delete(f"{missing}/taskstate-meta").status_code == 404
        assert admin.get(f"{missing}/taskstate-meta/k").status_code == 404  # nothing stored
        here = f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/writer/taskstate-meta/k"
        assert admin.put(here, json={"value": 1}).status_code == 204  # an existing one: stored


# The permission matrix: each role's operations on task state (a DAG it may see, `ts_api`, and
# on 2.x a DAG outside a per-DAG role, `ts_fence`), on asset state, and the discovery listings.
# What each role may do is Airflow's rule for the same resources: 3.x's simple auth manager (DAG
# writes from `user`, asset writes from `op`), 2.x's FAB roles (task-instance edit/delete from
# User; Datasets create from User, delete from Op: docs/api.md).
OPS = ("read", "list", "write", "delete", "clear")
READS = {"read", "list"}
ALL = set(OPS)
MATRIX_3 = {  # role: (task operations, asset operations)
    "viewer": (READS, READS),
    "user": (ALL, READS),
    "op": (ALL, ALL),
    "admin": (ALL, ALL),
}
MATRIX_2 = {
    "viewer": (READS, READS),
    "user": (ALL, READS | {"write"}),
    "op": (ALL, ALL),
    "admin": (ALL, ALL),
    "dag_a": (ALL, set()),  # a role with DAG `ts_api` only, and no Datasets permission
}
# A FAB role allowed DAG `ts_api` alone (Airflow 2's per-DAG permissions), with what FAB asks
# for a task instance besides: the Task Instances and DAG Runs permissions for the method.
DAG_A_ROLE = {
    "name": "ts_api_only",
    "actions": [
        {"action": {"name": action}, "resource": {"name": resource}}
        for action, resource in [
            ("can_read", "DAG:ts_api"), ("can_edit", "DAG:ts_api"),
            *((a, r) for a in ("can_read", "can_edit", "can_delete")
              for r in ("Task Instances", "DAG Runs")),
        ]
    ],
}  # fmt: skip


def _headers(deployment: Deployment, who: str) -> dict[str, str]:
    if deployment.major >= 3 or who in ("admin", "viewer"):
        return deployment.credentials(who)
    if who == "dag_a":
        with deployment.client("admin") as admin:
            made = admin.post("/api/v1/roles", json=DAG_A_ROLE)
        assert made.status_code in (200, 409), made.text  # 409: made by an earlier test
        return _fab_user(deployment, "dag_a", DAG_A_ROLE["name"])
    return _fab_user(deployment, who, who.capitalize())


def _allowed(http: httpx.Client, base: str, who: str, **params: Any) -> set[str]:
    """The operations `who` may do on the state at `base` (a task instance's or an asset's,
    holding the key `kept`): each is done, and is either done (200/204) or refused (403)."""
    got = {
        "read": http.get(f"{base}/kept", params=params).status_code,
        "list": http.get(base, params=params).status_code,
        "write": http.put(f"{base}/by_{who}", params=params, json={"value": who}).status_code,
        "delete": http.delete(f"{base}/kept", params=params).status_code,
    }
    got["clear"] = http.delete(base, params=params).status_code
    assert set(got.values()) <= {200, 204, 403}, (who, base, got)
    return {op for op, status in got.items() if status != 403}


def _keys(admin: httpx.Client, base: str, **params: Any) -> set[str]:
    body = admin.get(base, params=params).json()
    entries = body.get("task_state_store", body.get("asset_state_store"))
    return {entry["key"] for entry in entries}


def test_every_role_may_do_what_airflow_grants_it_and_nothing_more(
    deployment: Deployment, run_id: str
) -> None:
    matrix = MATRIX_3 if deployment.major >= 3 else MATRIX_2
    task: tuple[str, dict[str, str]] = (
        f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/scratch/state-store",
        {},
    )
    asset = (f"{V2}/assets/state-store", {"name": "ts_matrix_asset"})
    other_dag = f"{V2}/dags/ts_fence/dagRuns/no_such_run/taskInstances/held/state-store"
    seen: dict[str, tuple[set[str], set[str]]] = {}
    with deployment.client("admin") as admin:
        for who in matrix:
            for base, params in (task, asset):
                put = admin.put(f"{base}/kept", params=params, json={"value": "kept"})
                assert put.status_code == 204, put.text
            headers = _headers(deployment, who)
            with httpx.Client(base_url=deployment.base_url, headers=headers, timeout=60) as http:
                seen[who] = (
                    _allowed(http, task[0], who),
                    _allowed(http, asset[0], who, **asset[1]),
                )
                for (base, params), allowed in zip((task, asset), seen[who], strict=True):
                    left = _keys(admin, base, **params)  # what a refused write or delete left
                    assert ("kept" in left) == (not {"delete", "clear"} & allowed), (who, left)
                    assert (f"by_{who}" in left) == ("write" in allowed and "clear" not in allowed)
                # Discovery lists what the role may read, and nothing else.
                admin.put(f"{asset[0]}/kept", params=asset[1], json={"value": "kept"})
                dags = http.get(f"{V2}/dags")
                assets = http.get(f"{V2}/assets")
                assert (dags.status_code, assets.status_code) == (200, 200), assets.text
                listed = {d["dag_id"] for d in dags.json()["dags"]}
                named = {a["name"] for a in assets.json()["assets"]}
                assert ("ts_matrix_asset" in named) == ("read" in seen[who][1]), (who, named)
                if who == "dag_a":
                    assert listed == {"ts_api"}, listed
                    assert _allowed(http, other_dag, who) == set()  # DAG `ts_fence` is not its
                else:
                    assert "ts_api" in listed, (who, listed)
            admin.delete(task[0])
            admin.delete(asset[0], params=asset[1])
    assert seen == matrix, f"Airflow {deployment.version}: {seen}"


# Airflow 3 has no CSRF check (docs/api.md, 'Cookie-authenticated writes').
@pytest.mark.parametrize("deployment", AIRFLOW2_HOST, indirect=True)
def test_csrf_is_skipped_only_when_the_authorization_header_authenticated(
    deployment: Deployment, run_id: str
) -> None:
    url = f"{task_url(run_id, 'writer')}/csrf"
    with _ui_session(deployment) as ui:
        for junk in ("Basic Og==", "Bearer not-a-token-at-all", "Negotiate abc"):
            ridden = ui.put(url, json={"value": junk}, headers={"Authorization": junk})
            assert ridden.status_code in (400, 401), (junk, ridden.status_code, ridden.text)
            assert ridden.status_code == 400 or junk.startswith("Bearer"), ridden.text
        assert ui.get(url).status_code == 404  # none of them wrote
        viewer = deployment.credentials("viewer")  # the header's user, not the session's
        assert ui.put(url, json={"value": 1}, headers=viewer).status_code == 403
        admin = deployment.credentials("admin")
        assert ui.put(url, json={"value": 2}, headers=admin).status_code == 204
        assert ui.get(url).json()["value"] == 2


# The 3.x pages ask for Airflow's sign-in themselves (tests/ui).
@pytest.mark.parametrize("deployment", AIRFLOW2_HOST, indirect=True)
def test_the_task_state_pages_send_a_signed_out_visitor_to_sign_in(
    deployment: Deployment,
) -> None:
    with httpx.Client(base_url=deployment.base_url, timeout=60) as anonymous:
        for page in ("/taskstate-ui/", "/taskstate-ui/assets"):
            sent = anonymous.get(page)
            assert sent.status_code == 302, (page, sent.status_code, sent.text[:500])
            location = httpx.URL(sent.headers["location"])
            assert location.path == "/login/"
            assert location.params["next"].endswith(page)
