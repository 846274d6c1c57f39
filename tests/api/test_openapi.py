"""The OpenAPI document is complete and valid, and the health route names the backend."""

from __future__ import annotations

import httpx
from openapi_spec_validator import validate
from tests.api.conftest import Served

import taskstate.ops


def test_openapi_is_valid_and_lists_every_route(api: httpx.Client) -> None:
    response = api.get("/taskstate/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    validate(spec)
    task = "/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/state-store"
    assert set(spec["paths"]) >= {
        task,
        task + "/{key}",
        "/api/v2/assets/state-store",
        "/api/v2/assets/state-store/{key}",
        "/api/v2/dags",
        "/api/v2/dags/{dag_id}/dagRuns",
        "/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances",
        "/api/v2/assets",
        "/health",
    }
    history = task.replace("/state-store", "/taskstate-history")
    assert set(spec["paths"][history + "/{key}"]) == {"get", "post"}
    assert set(spec["paths"][history]) == {"get", "post"}  # restore as of (and its preview)
    assert set(spec["paths"]["/api/v2/assets/taskstate-history/{key}"]) == {"get", "post"}
    assert set(spec["paths"][task + "/{key}"]) == {"get", "put", "patch", "delete"}
    assert set(spec["paths"][task]) == {"get", "delete"}
    update = task.replace("/state-store", "/taskstate-update") + "/{key}"
    assert set(spec["paths"][update]) == {"post"}
    assert set(spec["paths"]["/api/v2/assets/taskstate-update/{key}"]) == {"post"}
    ops = spec["components"]["schemas"]["TaskUpdateBody"]["properties"]["op"]["enum"]
    assert ops == list(taskstate.ops.NAMES)  # the documented operations are the module's
    body = spec["components"]["schemas"]["TaskStateBody"]
    assert body["additionalProperties"] is False


def test_openapi_and_health_need_no_token(served: Served) -> None:
    with httpx.Client(base_url=served.base) as client:
        assert client.get("/taskstate/openapi.json").status_code == 200
        health = client.get("/taskstate/health")
        assert health.status_code == 200
        # Anonymous on a keyed server: no backend URL or path, no version (defect 17).
        assert health.json() == {"status": "ok"}
        assert client.get("/taskstate/health/live").json() == {"status": "ok"}
    with served.admin() as admin:
        body = admin.get("/taskstate/health").json()
        assert body["status"] == "ok"
        assert body["backend"].startswith("sqlite:///")
    with served.client(dag_ids=("d",)) as user:
        assert user.get("/taskstate/health").json() == {"status": "ok"}
