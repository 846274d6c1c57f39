"""taskstate's HTTP API inside real Airflow: the plugin on Airflow 3.2's api-server and on
Airflow 2.11's webserver, with Airflow's own authentication and permissions, against state
that real DAG runs write and read."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.airflow.deployment import Deployment, Deployments
from tests.airflow.harness import airflow_env, checkout_overlay, versions

# The first test starts the deployment (its CLI setup, then up to 240 s), waits for a task
# instance (180 s) and a run (300 s); the fencing test for try 2 (300 s) and its run (300 s).
# Each Airflow CLI call took up to 3 minutes on a machine at load 27: room for that too.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1500)]

HOSTS = [v for v in ("3.2", "2.11") if v in versions()] or ["none"]
V2 = "/taskstate/api/v2"


def task_url(run_id: str, task_id: str) -> str:
    return f"{V2}/dags/ts_api/dagRuns/{run_id}/taskInstances/{task_id}/state-store"


@pytest.fixture(scope="module", params=HOSTS)
def deployment(request: pytest.FixtureRequest, deployments: Deployments) -> Deployment:
    if request.param == "none":
        pytest.skip("neither Airflow 3.2 nor 2.11 selected")
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
            "map_index": -1,
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
        assert http.get(f"{V2}/assets/999999/state-store").status_code == 404
        listed = http.get(f"{V2}/assets").json()["assets"]
        assert {"name": next(iter(query.values())), "keys": 1} in listed
    if deployment.major >= 3:  # the id Airflow's auth manager is asked about, as for its routes
        lookup = deployment.home.python(
            "-c",
            "from taskstate import AssetScope\n"
            "from taskstate.airflow.api_hosting import asset_id\n"
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
    for try 1 is refused (409) and writes nothing; try 2's token writes (then releases it)."""
    run = deployment.trigger("ts_fence")
    url = f"{V2}/dags/ts_fence/dagRuns/{run}/taskInstances/held/state-store"
    tokens = {
        n: {"Authorization": "Bearer " + deployment.taskstate_token(
            subject=f"try {n}", dag_ids=("ts_fence",), run_id=run, task_id="held", map_index=-1,
            try_number=n)}
        for n in (1, 2)
    }  # fmt: skip
    with httpx.Client(base_url=deployment.base_url, timeout=60) as http:
        deadline = time.monotonic() + 300
        while (seen := http.get(f"{url}/running", headers=tokens[2])).status_code != 200:
            assert seen.status_code == 404, seen.text
            assert time.monotonic() < deadline, f"try 2 never ran\n{deployment.log_tail()}"
            time.sleep(1)
        assert seen.json()["value"] == 2
        stale = http.put(f"{url}/k", json={"value": "from try 1"}, headers=tokens[1])
        assert stale.status_code == 409, stale.text
        assert "this token is for try 1" in stale.json()["detail"], stale.text
        assert "is running try 2" in stale.json()["detail"], stale.text
        assert http.get(f"{url}/k", headers=tokens[2]).status_code == 404  # nothing written
        assert (
            http.put(f"{url}/k", json={"value": "from try 2"}, headers=tokens[2]).status_code == 204
        )
        assert (
            http.put(f"{url}/release", json={"value": True}, headers=tokens[2]).status_code == 204
        )
    deployment.wait_for_run("ts_fence", run)


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
    own API. 3.x: Airflow's own API takes a write with only the UI's `_token` cookie (no CSRF
    token exists; the cookie is SameSite=Lax, so other sites' pages cannot send it with a
    write), and so does the plugin (docs/api.md)."""
    url = f"{task_url(run_id, 'writer')}/from_the_ui"
    if deployment.major >= 3:  # the UI keeps Airflow's JWT in the `_token` cookie
        token = deployment.credentials("admin")["Authorization"].split(" ", 1)[1]
        with httpx.Client(base_url=deployment.base_url, cookies={"_token": token}) as ui:
            own = ui.post("/api/v2/variables", json={"key": f"ui_{run_id}", "value": "1"})
            assert own.status_code == 201, own.text  # Airflow's own route: the cookie suffices
            assert ui.put(url, json={"value": 1}).status_code == 204
            assert ui.get(url).json()["last_updated_by"] == {"kind": "api", "subject": "admin"}
        return
    with httpx.Client(base_url=deployment.base_url, follow_redirects=True, timeout=60) as ui:
        form = ui.get("/login/").text
        csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', form)
        assert csrf is not None, form[:2000]
        ui.post("/login/", data={"username": "admin", "password": "admin-pw",
                                 "csrf_token": csrf.group(1)})  # fmt: skip
        assert ui.get(url).status_code == 404  # logged in: the key is just absent
        refused = ui.put(url, json={"value": 1})
        assert refused.status_code == 400  # no CSRF token
        page = ui.get("/home").text
        token = re.search(r"var csrfToken = '([^']+)'", page)  # what the UI's JavaScript sends
        assert token is not None, page[:2000]
        ok = ui.put(url, json={"value": 1}, headers={"X-CSRFToken": token.group(1)})
        assert ok.status_code == 204, ok.text
        assert ui.get(url).json()["last_updated_by"] == {"kind": "api", "subject": "admin"}
