"""The HTTP API's metrics: every request timed by route template and status, and
`GET /taskstate/metrics` as Prometheus text (parsed with prometheus_client's own parser),
admin-only when a secret key is set; a real `taskstate serve` process serves it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests.api.conftest import SECRET, TASK, Served
from tests.api.server import running
from tests.api.test_serve import _env, serving
from tests.conftest import Clock

from taskstate import StateStore
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import SigningKeys
from taskstate.metrics import Metrics, PrometheusSink
from taskstate.settings import Settings


def serve(
    tmp_path: Path, clock: Clock, metrics: Metrics, keys: SigningKeys | None
) -> Iterator[Served]:
    store = StateStore(
        f"sqlite:///{tmp_path}/state.db", settings=Settings(), clock=clock, metrics=metrics
    )
    with store, running(standalone_app(store, keys)) as base:
        yield Served(base, store, clock, keys)


@pytest.fixture
def measured(tmp_path: Path, clock: Clock) -> Iterator[Served]:
    yield from serve(tmp_path, clock, Metrics(prometheus=PrometheusSink()), SigningKeys([SECRET]))


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_requests_are_timed_by_route_template_and_status(measured: Served) -> None:
    with measured.admin() as api:
        assert api.put(f"{TASK}/cursor", json={"value": 7}).status_code == 204
        assert api.get(f"{TASK}/cursor").status_code == 200
        assert api.get(f"{TASK}/absent").status_code == 404
        assert api.get(f"{TASK}/other").status_code == 404
        response = api.get("/taskstate/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(response.text)
    requests = {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in found
        if s.name == "taskstate_api_request_seconds_count"
    }
    # The route's name, one series for every key: a key, dag or run id is never a tag.
    assert requests == {
        ("set_task_state", "PUT", "204"): 1,
        ("get_task_state", "GET", "200"): 1,
        ("get_task_state", "GET", "404"): 2,
    }
    statuses = {s.name: s.value for s in found if s.name.startswith("taskstate_api_status_")}
    assert statuses == {"taskstate_api_status_2xx_total": 2, "taskstate_api_status_4xx_total": 2}
    # The store's own metrics come along.
    sets = [s for s in found if s.name == "taskstate_task_write_seconds_count"]
    assert [s.value for s in sets] == [1], found


def test_metrics_need_an_admin_token(measured: Served) -> None:
    assert httpx.get(f"{measured.base}/taskstate/metrics").status_code == 401
    with measured.client(dag_ids=["d"], subject="worker") as worker:
        response = worker.get("/taskstate/metrics")
    assert response.status_code == 403
    assert "admin" in response.json()["detail"]


def test_an_open_server_serves_metrics_without_a_token(tmp_path: Path, clock: Clock) -> None:
    for served in serve(tmp_path, clock, Metrics(prometheus=PrometheusSink()), None):
        assert httpx.get(f"{served.base}/taskstate/metrics").status_code == 200


def test_without_prometheus_there_is_no_metrics_route(open_served: Served) -> None:
    assert httpx.get(f"{open_served.base}/taskstate/metrics").status_code == 404


def test_taskstate_serve_exposes_prometheus_text(tmp_path: Path) -> None:
    with serving(tmp_path, _env(tmp_path)) as (base, _proc):
        assert httpx.put(f"{base}{TASK}/k", json={"value": 1}).status_code == 204
        response = httpx.get(f"{base}/taskstate/metrics")
    assert response.status_code == 200
    names = {s.name for s in samples(response.text)}
    assert {"taskstate_task_write_seconds_count", "taskstate_api_request_seconds_sum"} <= names
