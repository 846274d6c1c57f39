"""Hypothesis over real HTTP: any body and any key gives 2xx or 4xx, never 500, and a refused
request writes nothing. Examples are derandomized (the `ci` profile in tests/conftest.py)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AwareDatetime, TypeAdapter
from tests.api.conftest import TASK, Served, key_path

from taskstate import TaskScope

SCOPE = TaskScope("d", "r", "t")
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.one_of(
    st.builds(lambda v: {"value": v}, json_values),
    st.builds(
        lambda v, e: {"value": v, "expires_at": e},
        json_values,
        st.none()
        | st.text(max_size=30)
        | st.integers()
        | st.datetimes(timezones=st.just(timezone.utc)).map(datetime.isoformat),
    ),
    st.dictionaries(st.text(max_size=10), json_values, max_size=3),
    json_values,
)


_WHEN = TypeAdapter(AwareDatetime)  # how the PUT body's model reads `expires_at` (pydantic's)


def _expired(body: dict[str, Any]) -> bool:
    """Whether the accepted body asked for an expiry already past (an absent key, then)."""
    when = body.get("expires_at", "default")
    if when is None or when == "default":  # never / the default retention: stored
        return False
    return _WHEN.validate_json(json.dumps(when)).timestamp() <= time.time()


def _snapshot(served: Served) -> list[tuple[str, Any]]:
    return served.store.task_state(SCOPE).items()


def _check(response: httpx.Response, served: Served, before: list[tuple[str, Any]]) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert _snapshot(served) == before, response.text
        detail = response.json()["detail"]
        assert isinstance(detail, (str, list))


@FUZZ
@given(body=bodies)
def test_any_json_body(api: httpx.Client, served: Served, body: Any) -> None:
    before = _snapshot(served)
    text = json.dumps(body, allow_nan=True)
    response = api.put(f"{TASK}/k", content=text, headers={"content-type": "application/json"})
    _check(response, served, before)
    if response.status_code == 204:  # stored, unless its expires_at is already past
        stored = served.store.task_state(SCOPE).get("k")
        assert stored == (None if _expired(body) else body["value"]), (body, stored)
    served.store.task_state(SCOPE).clear()


@FUZZ
@given(raw=st.binary(max_size=200))
def test_any_bytes_as_body(api: httpx.Client, served: Served, raw: bytes) -> None:
    before = _snapshot(served)
    _check(api.put(f"{TASK}/k", content=raw), served, before)
    served.store.task_state(SCOPE).clear()


@FUZZ
@given(key=st.text(max_size=40))
def test_any_key(api: httpx.Client, served: Served, key: str) -> None:
    path = f"{TASK}/{key_path(key)}"
    before = _snapshot(served)
    response = api.put(path, json={"value": key})
    _check(response, served, before)
    if response.status_code == 204:
        assert api.get(path).json()["key"] == key
        assert served.store.task_state(SCOPE).keys() == [key]
        assert api.delete(path).status_code == 204
    assert served.store.task_state(SCOPE).keys() == []


@FUZZ
@given(
    dag=st.text(min_size=1, max_size=12),
    params=st.dictionaries(
        st.sampled_from(["map_index", "limit", "offset", "all_map_indices", "name"]),
        st.text(max_size=6),
    ),
)
def test_any_path_and_query(
    api: httpx.Client, served: Served, dag: str, params: dict[str, str]
) -> None:
    before = _snapshot(served)
    path = f"/taskstate/api/v2/dags/{key_path(dag)}/dagRuns/r/taskInstances/t/state-store"
    for method in ("GET", "DELETE"):
        _check(api.request(method, path, params=params), served, before)
    response = api.put(f"{path}/k", params=params, json={"value": 1})
    assert response.status_code < 500, response.text
    served.store.task_state(SCOPE).clear()
