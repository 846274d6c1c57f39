"""Task state routes over real HTTP: paths, bodies, status codes and shapes of Airflow 3.3."""

from __future__ import annotations

import http.client
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from tests.api.conftest import SECRET, TASK, Served, key_path
from tests.api.server import running
from tests.conftest import Clock

from taskstate import StateStore, TaskScope
from taskstate.api.errors import dumps
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.offload import OffloadBackend
from taskstate.store import REF_PREFIX
from taskstate.wire import task_entry

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)  # the Clock fixture's 1_800_000_000
SCOPE = TaskScope("d", "r", "t")
JSON = {"content-type": "application/json"}


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_list_is_empty_without_state(api: httpx.Client) -> None:
    response = api.get(TASK)
    assert response.status_code == 200
    assert response.json() == {"task_state_store": [], "total_entries": 0, "exact_total": True}


def test_put_then_get_returns_the_entry_with_default_expiry(
    api: httpx.Client, served: Served
) -> None:
    response = api.put(f"{TASK}/k", json={"value": {"rows": [1, 2.5, "x", True]}})
    assert response.status_code == 204
    assert response.content == b""
    got = api.get(f"{TASK}/k")
    assert got.status_code == 200
    assert got.json() == {
        "key": "k",
        "value": {"rows": [1, 2.5, "x", True]},
        "updated_at": iso(NOW),
        "expires_at": iso(NOW + timedelta(days=30)),
        "last_updated_by": {"kind": "api", "subject": "admin"},
    }
    assert got.headers["etag"] == response.headers["etag"]
    # The same value through the Python accessor: one store, one rule.
    assert served.store.task_state(SCOPE).get("k") == {"rows": [1, 2.5, "x", True]}


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (None, None),
        ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
        ("2030-01-01T02:00:00+02:00", "2030-01-01T00:00:00Z"),
        ("default", iso(NOW + timedelta(days=30))),
    ],
)
def test_put_expires_at_forms(api: httpx.Client, sent: str | None, expected: str | None) -> None:
    assert api.put(f"{TASK}/k", json={"value": 1, "expires_at": sent}).status_code == 204
    assert api.get(f"{TASK}/k").json()["expires_at"] == expected


def test_default_retention_zero_never_expires(tmp_path, clock) -> None:  # type: ignore[no-untyped-def]
    from tests.api.conftest import SECRET, _serve

    from taskstate.api.tokens import SigningKeys

    for served in _serve(tmp_path, clock, SigningKeys([SECRET]), default_retention_days=0):
        with served.admin() as api:
            assert api.put(f"{TASK}/k", json={"value": 1}).status_code == 204
            assert api.get(f"{TASK}/k").json()["expires_at"] is None


def test_put_overwrites_value_and_expiry(api: httpx.Client) -> None:
    api.put(f"{TASK}/k", json={"value": 1, "expires_at": "2030-01-01T00:00:00Z"})
    assert api.put(f"{TASK}/k", json={"value": 2, "expires_at": None}).status_code == 204
    body = api.get(f"{TASK}/k").json()
    assert (body["value"], body["expires_at"]) == (2, None)


def test_get_missing_key_is_404(api: httpx.Client) -> None:
    response = api.get(f"{TASK}/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "Task state store key 'nope' not found"}


def test_expired_key_is_absent_everywhere(api: httpx.Client, served: Served) -> None:
    soon = iso(NOW + timedelta(seconds=60))
    api.put(f"{TASK}/short", json={"value": 1, "expires_at": soon})
    api.put(f"{TASK}/long", json={"value": 2})
    assert api.get(f"{TASK}/short").status_code == 200
    served.clock.now += 61
    assert api.get(f"{TASK}/short").status_code == 404
    listing = api.get(TASK).json()
    assert [e["key"] for e in listing["task_state_store"]] == ["long"]
    assert listing["total_entries"] == 1
    assert api.patch(f"{TASK}/short", json={"value": 3}).status_code == 404


@pytest.mark.parametrize(
    "when",
    [
        "2020-01-01T00:00:00Z",  # in the past: it would be stored absent (defect 2)
        "9999-12-31T23:59:59-23:59",  # after 9999-12-31 UTC: unreadable once stored
        "9999-12-31T23:59:59.5Z",
    ],
)
def test_an_expiry_in_the_past_or_after_9999_is_422(
    api: httpx.Client, served: Served, when: str
) -> None:
    response = api.put(f"{TASK}/k", json={"value": 1, "expires_at": when})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "expires_at"]
    assert served.store.task_state(SCOPE).keys() == []
    latest = api.put(f"{TASK}/k", json={"value": 1, "expires_at": "9999-12-31T23:59:59Z"})
    assert latest.status_code == 204
    assert api.get(f"{TASK}/k").json()["expires_at"] == "9999-12-31T23:59:59Z"
    assert api.get(TASK).status_code == 200


@pytest.mark.parametrize(
    ("body", "loc", "msg_part"),
    [
        ('{"value": null}', ["body", "value"], "None cannot be stored"),
        ('{"value": NaN}', ["body", "value"], "NaN"),
        ('{"value": {"a": [1, Infinity]}}', ["body", "value"], "value['a'][1]"),
        ('{"value": "' + "x" * 70000 + '"}', ["body", "value"], "over the limit of 65535"),
        ('{"value": "\\ud800"}', ["body", "value"], "lone surrogate"),
        ("{}", ["body", "value"], "Field required"),
        ('{"value": 1, "extra": 2}', ["body", "extra"], "Extra inputs are not permitted"),
        ('{"value": 1, "expires_at": "2030-01-01T00:00:00"}', ["body", "expires_at"], "timezone"),
        ('{"value": 1, "expires_at": "tomorrow"}', ["body", "expires_at"], ""),
        ("not json", ["body", 0], "JSON"),
        ("", ["body"], "Field required"),
    ],
)
def test_bad_bodies_are_422_in_fastapis_shape_and_write_nothing(
    api: httpx.Client, served: Served, body: str, loc: list[object], msg_part: str
) -> None:
    response = api.put(f"{TASK}/k", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    assert detail[0]["loc"][: len(loc)] == loc or detail[0]["loc"][0] == "body"
    assert msg_part in detail[0]["msg"]
    assert served.store.task_state(SCOPE).keys() == []


def test_a_body_nested_too_deeply_to_parse_is_400(api: httpx.Client, served: Served) -> None:
    # FastAPI answers a body json.loads cannot parse for depth with 400, before any route.
    response = api.put(f"{TASK}/k", content="[" * 60000 + "]" * 60000, headers=JSON)
    assert response.status_code == 400
    assert served.store.task_state(SCOPE).keys() == []


def test_the_422_message_is_the_python_accessors(api: httpx.Client, served: Served) -> None:
    response = api.put(f"{TASK}/k", content='{"value": {"a": NaN}}', headers=JSON)
    with pytest.raises(ValueError) as raised:
        served.store.task_state(SCOPE).set("k", {"a": float("nan")})
    assert response.json()["detail"][0]["msg"] == str(raised.value)


def test_value_limit_zero_accepts_large_values(tmp_path, clock) -> None:  # type: ignore[no-untyped-def]
    from tests.api.conftest import SECRET, _serve

    from taskstate.api.tokens import SigningKeys

    for served in _serve(tmp_path, clock, SigningKeys([SECRET]), max_value_storage_bytes=0):
        with served.admin() as api:
            big = "x" * 200_000
            assert api.put(f"{TASK}/k", json={"value": big}).status_code == 204
            assert api.get(f"{TASK}/k").json()["value"] == big


def test_body_over_the_limit_is_413_and_writes_nothing(api: httpx.Client, served: Served) -> None:
    body = json.dumps({"value": "x" * (65535 + 64 * 1024)})
    response = api.put(f"{TASK}/k", content=body)
    assert response.status_code == 413
    assert "bytes" in response.json()["detail"]

    def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: counted as it streams
        yield b'{"value": "'
        for _ in range(200):
            yield b"x" * 1024
        yield b'"}'

    response = api.put(f"{TASK}/k", content=chunks())
    assert response.status_code == 413
    assert served.store.task_state(SCOPE).keys() == []


def test_patch_keeps_expiry_and_returns_null(api: httpx.Client) -> None:
    api.put(f"{TASK}/k", json={"value": 1, "expires_at": "2030-01-01T00:00:00Z"})
    response = api.patch(f"{TASK}/k", json={"value": 2})
    assert response.status_code == 200
    assert response.json() is None
    body = api.get(f"{TASK}/k").json()
    assert (body["value"], body["expires_at"]) == (2, "2030-01-01T00:00:00Z")


def test_patch_missing_key_is_404_and_writes_nothing(api: httpx.Client, served: Served) -> None:
    response = api.patch(f"{TASK}/k", json={"value": 2})
    assert response.status_code == 404
    assert response.json() == {"detail": "Task state store key 'k' not found"}
    assert served.store.task_state(SCOPE).keys() == []


@pytest.mark.parametrize("body", ['{"value": null}', "{}", '{"value": 1, "expires_at": null}'])
def test_patch_bad_body_is_422(api: httpx.Client, body: str) -> None:
    api.put(f"{TASK}/k", json={"value": 1})
    assert api.patch(f"{TASK}/k", content=body).status_code == 422
    assert api.get(f"{TASK}/k").json()["value"] == 1


def test_delete_key_only_that_key_and_missing_is_noop(api: httpx.Client) -> None:
    api.put(f"{TASK}/a", json={"value": 1})
    api.put(f"{TASK}/b", json={"value": 2})
    assert api.delete(f"{TASK}/a").status_code == 204
    assert api.delete(f"{TASK}/a").status_code == 204
    assert [e["key"] for e in api.get(TASK).json()["task_state_store"]] == ["b"]


def test_clear_own_map_index_or_all(api: httpx.Client) -> None:
    for index in (-1, 0, 1):
        api.put(f"{TASK}/k", params={"map_index": index}, json={"value": index})
    assert api.delete(TASK).status_code == 204
    assert api.get(f"{TASK}/k").status_code == 404
    assert api.get(f"{TASK}/k", params={"map_index": 0}).json()["value"] == 0
    assert api.delete(TASK, params={"all_map_indices": "true"}).status_code == 204
    for index in (0, 1):
        assert api.get(f"{TASK}/k", params={"map_index": index}).status_code == 404


def test_map_indices_are_isolated(api: httpx.Client) -> None:
    api.put(f"{TASK}/k", params={"map_index": 3}, json={"value": "three"})
    assert api.get(TASK).json()["total_entries"] == 0
    assert api.get(TASK, params={"map_index": 3}).json()["total_entries"] == 1


@pytest.mark.parametrize("index", ["-2", "x", "1.5"])
def test_bad_map_index_is_422(api: httpx.Client, index: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = api.request(method, f"{TASK}/k", params={"map_index": index}, json={"value": 1})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "map_index"]


def test_pagination_is_by_key_ascending(api: httpx.Client) -> None:
    keys = [f"k{i:03d}" for i in range(120)]
    for key in reversed(keys):
        api.put(f"{TASK}/{key}", json={"value": key})
    first = api.get(TASK).json()
    # More follow: the total is not counted to the end ("more than 50"), unless asked for.
    assert (first["total_entries"], first["exact_total"]) == (51, False)
    assert [e["key"] for e in first["task_state_store"]] == keys[:50]
    counted = api.get(TASK, params={"exact_total": "true"}).json()
    assert (counted["total_entries"], counted["exact_total"]) == (120, True)
    assert counted["task_state_store"] == first["task_state_store"]
    page = api.get(TASK, params={"limit": 10, "offset": 115}).json()
    assert [e["key"] for e in page["task_state_store"]] == keys[115:]
    assert (page["total_entries"], page["exact_total"]) == (120, True)  # the keys end on it
    past = api.get(TASK, params={"offset": 500}).json()
    assert (past["task_state_store"], past["total_entries"], past["exact_total"]) == ([], 120, True)
    clamped = api.get(TASK, params={"limit": 1000}).json()
    assert len(clamped["task_state_store"]) == 100  # [api] maximum_page_limit, as Airflow clamps
    none = api.get(TASK, params={"limit": 0}).json()
    assert none == {"task_state_store": [], "total_entries": 120, "exact_total": True}
    prefixed = api.get(TASK, params={"key_prefix": "k11"}).json()
    assert [e["key"] for e in prefixed["task_state_store"]] == keys[110:120]
    assert (prefixed["total_entries"], prefixed["exact_total"]) == (10, True)
    assert api.get(TASK, params={"exact_total": "maybe"}).status_code == 422
    assert api.get(TASK, params={"limit": -1}).status_code == 422
    assert api.get(TASK, params={"offset": -1}).status_code == 422


@pytest.mark.parametrize(
    "key", [".", "..", "a/b", "%2F", "?", "#", "a b", "ключ", "日本/語", "a/../b", "+&=;", "/lead"]
)
def test_keys_are_data_over_http(api: httpx.Client, served: Served, key: str) -> None:
    path = f"{TASK}/{key_path(key)}"
    assert api.put(path, json={"value": key}).status_code == 204
    assert api.get(path).json()["key"] == key
    assert served.store.task_state(SCOPE).get(key) == key
    assert [e["key"] for e in api.get(TASK).json()["task_state_store"]] == [key]
    assert api.delete(path).status_code == 204
    assert served.store.task_state(SCOPE).keys() == []


def test_a_key_written_in_python_reads_over_http_with_its_writer(
    api: httpx.Client, served: Served
) -> None:
    served.store.task_state(SCOPE).set("from-task", [1])
    body = api.get(f"{TASK}/from-task").json()
    assert body["value"] == [1]
    assert body["last_updated_by"] == {
        "kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1,
    }  # fmt: skip


@pytest.mark.parametrize("key", ["", "x" * 513, "a\x00b", "tab\there"])
def test_bad_keys_are_422(api: httpx.Client, served: Served, key: str) -> None:
    response = api.put(f"{TASK}/{quote_all(key)}", json={"value": 1})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "path"
    assert served.store.task_state(SCOPE).keys() == []


def quote_all(key: str) -> str:
    return "".join(f"%{b:02X}" for b in key.encode())


def test_etags_make_writes_conditional(api: httpx.Client, served: Served) -> None:
    assert (
        api.put(f"{TASK}/k", json={"value": 1}, headers={"If-None-Match": "*"}).status_code == 204
    )
    assert (
        api.put(f"{TASK}/k", json={"value": 9}, headers={"If-None-Match": "*"}).status_code == 412
    )
    got = api.get(f"{TASK}/k")
    etag = got.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    assert api.get(f"{TASK}/k", headers={"If-None-Match": etag}).status_code == 304
    ok = api.put(f"{TASK}/k", json={"value": 2}, headers={"If-Match": etag})
    assert ok.status_code == 204
    assert ok.headers["etag"] != etag
    stale = api.put(f"{TASK}/k", json={"value": 3}, headers={"If-Match": etag})
    assert stale.status_code == 412
    assert api.patch(f"{TASK}/k", json={"value": 4}, headers={"If-Match": etag}).status_code == 412
    assert api.get(f"{TASK}/k").json()["value"] == 2
    fresh = api.get(f"{TASK}/k").headers["etag"]
    assert api.patch(f"{TASK}/k", json={"value": 5}, headers={"If-Match": fresh}).status_code == 200
    assert api.put(f"{TASK}/gone", json={"value": 1}, headers={"If-Match": "*"}).status_code == 412
    assert (
        api.put(f"{TASK}/k", json={"value": 6}, headers={"If-None-Match": etag}).status_code == 422
    )
    assert served.store.task_state(SCOPE).get("k") == 5


def test_every_answer_has_one_content_length(served: Served) -> None:
    """The 204s share one answer: sending it must not add a Content-Length per use (after
    100 of them, http.client refuses the response: "got more than 100 headers"). Read with
    http.client, which keeps duplicate headers (httpx folds equal ones)."""
    host = served.base.removeprefix("http://")
    token = {"Authorization": f"Bearer {served.token(admin=True)}"}
    conn = http.client.HTTPConnection(host, timeout=30)
    for method, body in [("PUT", b'{"value":1}'), ("GET", None), ("DELETE", None)] * 3:
        headers = {**token, "Content-Type": "application/json"} if body else token
        conn.request(method, f"{TASK}/k", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        assert len(response.msg.get_all("content-length") or []) == 1, (method, response.msg)
    conn.close()


def test_an_offloaded_value_is_answered_from_its_object(tmp_path: Path, clock: Clock) -> None:
    """A GET or a listing answers an inline value from the stored text; a row that holds an
    offload reference is answered with the object's value, never the reference. A listing
    decodes only its offloaded rows (counted through the store's `entry_of`), and its body is
    the bytes the decoded entries give through the API's encoder."""
    big = {"rows": ["é" * 100] * 20}  # over the threshold: offloaded
    keys = SigningKeys([SECRET])
    offload = OffloadBackend(f"file://{tmp_path}/o", threshold=1000)
    store = StateStore(f"sqlite:///{tmp_path}/state.db", clock=clock, worker_backend=offload)
    with store, running(standalone_app(store, keys)) as base:
        token = keys.issue(Claims(subject="admin", admin=True))
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api:
            assert api.put(f"{TASK}/big", json={"value": big}).status_code == 204
            assert api.put(f"{TASK}/small", json={"value": [1]}).status_code == 204
            row = store.task_state(SCOPE).live_row("big")
            assert row is not None and row.value.startswith(REF_PREFIX)
            got = api.get(f"{TASK}/big")
            assert got.status_code == 200 and got.json()["value"] == big
            assert got.headers["etag"] == api.get(f"{TASK}/big").headers["etag"]
            assert api.get(f"{TASK}/small").json()["value"] == [1]
            for k in range(3):
                assert (
                    api.put(f"{TASK}/inline_{k}", json={"value": {"k": ["é", k]}}).status_code
                    == 204
                )
            decoded: list[str] = []
            entry_of = store.entry_of
            store.entry_of = lambda row: decoded.append(row.key) or entry_of(row)  # type: ignore[method-assign]
            listed = api.get(TASK, params={"limit": 4})
            assert decoded == ["big"]  # the 3 inline rows of the page went in as stored
            page = store.task_state(SCOPE).page(limit=4)
            assert listed.content == dumps(
                {"task_state_store": [task_entry(e) for e in page.items],
                 "total_entries": 5, "exact_total": False}
            )  # fmt: skip
            assert [item["key"] for item in listed.json()["task_state_store"]] == [
                "big", "inline_0", "inline_1", "inline_2"
            ]  # fmt: skip
